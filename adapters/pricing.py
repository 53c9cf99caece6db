"""Model budgets: the per-model price table, a run's token and cost budget, and the
usage totals counted from the provider's numbers (estimated when a response has none)."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TypeVar

from core.jsonutil import JSON

_N = TypeVar("_N", int, float)


@dataclass(frozen=True)
class Price:
    """US dollars per million tokens."""

    input_per_mtok: float
    output_per_mtok: float

    def cost(self, input_tokens: int, output_tokens: int) -> float:
        return (input_tokens * self.input_per_mtok + output_tokens * self.output_per_mtok) / 1_000_000


def parse_price_table(raw: object) -> dict[str, Price]:
    """``{"model": {"input": usd_per_mtok, "output": usd_per_mtok}}`` (JSON text or
    an already parsed object). ``"*"`` may price every model not listed. Raises
    ValueError saying what is wrong."""
    if isinstance(raw, str | bytes):
        try:
            raw = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise ValueError(f"not valid JSON: {exc}") from None
    if not isinstance(raw, dict) or not raw:
        raise ValueError('must be a non-empty JSON object {"model": {"input": usd_per_mtok, "output": usd_per_mtok}}')
    table: dict[str, Price] = {}
    for model, entry in raw.items():
        if not isinstance(model, str) or not model.strip():
            raise ValueError("model names must be non-empty strings")
        if not isinstance(entry, dict) or set(entry) != {"input", "output"}:
            raise ValueError(f"{model!r} must be an object with exactly 'input' and 'output' (USD per million tokens)")
        numbers: list[float] = []
        for side in ("input", "output"):
            value = entry[side]
            if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
                raise ValueError(f"{model!r}.{side} must be a non-negative number, got {value!r}")
            numbers.append(float(value))
        table[model] = Price(numbers[0], numbers[1])
    return table


def price_for(model: str, table: Mapping[str, Price]) -> Price | None:
    """The exact entry, else the longest entry that is a dated/suffixed variant's
    prefix (``gpt-4o-mini`` prices ``gpt-4o-mini-2024-07-18``), else ``*``."""
    if model in table:
        return table[model]
    prefixes = [name for name in table if name != "*" and model.startswith(name + "-")]
    if prefixes:
        return table[max(prefixes, key=len)]
    return table.get("*")


@dataclass(frozen=True)
class Budget:
    """A run's model budget; None means no limit on that side. ``tokens_by`` and
    ``cost_by`` name whose limit a side is when it is not the run's own (a project's
    daily budget), so the stop says which was reached.

    ``reserve_tokens`` and ``reserve_cost_usd`` are kept back for verification and the
    report: the model works within the budget less the reserve, then has the reserve
    for checks and ``finish`` alone (adapters.conversation, "closing")."""

    max_tokens: int | None = None
    max_cost_usd: float | None = None
    tokens_by: str = ""
    cost_by: str = ""
    reserve_tokens: int = 0
    reserve_cost_usd: float = 0.0

    def intersect(self, bound: Budget) -> Budget:
        """Never more than ``bound`` allows, whatever the run asked for, and the larger reserve."""
        tokens, tokens_by = _tighter(self.max_tokens, self.tokens_by, bound.max_tokens, bound.tokens_by)
        cost, cost_by = _tighter(self.max_cost_usd, self.cost_by, bound.max_cost_usd, bound.cost_by)
        reserve_tokens, reserve_cost = max(self.reserve_tokens, bound.reserve_tokens), max(self.reserve_cost_usd, bound.reserve_cost_usd)
        return Budget(tokens, cost, tokens_by, cost_by, reserve_tokens, reserve_cost)


def _tighter(a: _N | None, a_by: str, b: _N | None, b_by: str) -> tuple[_N | None, str]:
    if a is None:
        return b, b_by
    if b is None or a <= b:
        return a, a_by
    return b, b_by


@dataclass
class UsageTotals:
    requests: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0
    estimated: bool = False  # some response had no usage numbers; counts were estimated
    last_input_tokens: int = 0

    @property
    def tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    def to_json(self) -> dict[str, JSON]:
        return {
            "requests": self.requests,
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cost_usd": round(self.cost_usd, 8),
            "estimated": self.estimated,
            "last_input_tokens": self.last_input_tokens,
        }

    @classmethod
    def from_json(cls, raw: object) -> UsageTotals:
        if not isinstance(raw, dict):
            return cls()
        return cls(
            requests=_nonneg_int(raw.get("requests")),
            input_tokens=_nonneg_int(raw.get("input_tokens")),
            output_tokens=_nonneg_int(raw.get("output_tokens")),
            cost_usd=float(raw.get("cost_usd") or 0.0),
            estimated=bool(raw.get("estimated", False)),
            last_input_tokens=_nonneg_int(raw.get("last_input_tokens")),
        )


def _nonneg_int(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


def estimate_tokens(value: object) -> int:
    """A rough count (4 characters a token) for responses without usage numbers."""
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    return len(text) // 4 + 1
