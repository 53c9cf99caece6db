"""Executor fault injection (``--fault TOOL:KIND[:N]``): the runtime's responses to a
misbehaving executor are tested against the real executor wrapped in this."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Literal

from core.errors import FieldProblem, InputError
from core.ports import Call, Executor, Reconciliation
from core.state import PendingEffect

FaultKind = Literal["transient", "unknown", "invalid_receipt", "timeout", "infrastructure"]
FAULT_KINDS: tuple[str, ...] = ("transient", "unknown", "invalid_receipt", "timeout", "infrastructure")
INJECTED_INFRASTRUCTURE = "injected fault: the sandbox engine did not answer"


@dataclass
class Fault:
    tool: str
    kind: FaultKind
    remaining: int


def parse_faults(specs: Iterable[str], known_tools: set[str]) -> list[Fault]:
    faults: list[Fault] = []
    problems: list[FieldProblem] = []
    for index, spec in enumerate(specs):
        parts = spec.split(":")
        where = f"--fault[{index}]"
        if len(parts) not in (2, 3):
            problems.append(FieldProblem(where, f"{spec!r} is not TOOL:KIND[:N]"))
            continue
        tool, kind = parts[0], parts[1]
        count = 1
        if tool not in known_tools:
            problems.append(FieldProblem(where, f"unknown tool {tool!r}"))
        if kind not in FAULT_KINDS:
            problems.append(FieldProblem(where, f"kind {kind!r} is not one of {', '.join(FAULT_KINDS)}"))
        if len(parts) == 3:
            if not parts[2].isdigit() or int(parts[2]) < 1:
                problems.append(FieldProblem(where, f"N must be a positive integer, got {parts[2]!r}"))
            else:
                count = int(parts[2])
        if not problems:
            faults.append(Fault(tool, kind, count))  # type: ignore[arg-type]
    if problems:
        raise InputError("faults", problems)
    return faults


@dataclass
class FaultyExecutor:
    """Wraps an executor; for the first N calls of a tool, misbehaves as told."""

    inner: Executor
    faults: list[Fault]
    revision: Callable[[], str]
    has_effect: Callable[[str], bool]
    injected: list[str] = field(default_factory=list)

    def _take(self, tool: str) -> FaultKind | None:
        for fault in self.faults:
            if fault.tool == tool and fault.remaining > 0:
                fault.remaining -= 1
                self.injected.append(f"{tool}:{fault.kind}")
                return fault.kind
        return None

    def execute(self, call: Call) -> object:
        kind = self._take(call.tool)
        if kind is None:
            return self.inner.execute(call)
        effectful = self.has_effect(call.tool)
        if kind == "transient" or (kind == "timeout" and not effectful):
            return self._receipt(call, "transient", "none", {"fault": kind})
        if kind == "infrastructure":
            return self._receipt(call, "transient", "none", {"fault": kind, "infrastructure": INJECTED_INFRASTRUCTURE})
        if kind == "timeout":
            # The request may or may not have reached the effect; report it honestly.
            return self._receipt(call, "unknown", "unknown", {"fault": kind, "timed_out": True})
        real = self.inner.execute(call)
        if kind == "unknown":
            return self._receipt(call, "unknown", "unknown" if effectful else "none", {"fault": kind})
        if isinstance(real, dict):
            return {**real, "call_id": call.call_id + "-forged"}
        return {"not": "a receipt"}

    def _receipt(self, call: Call, status: str, effect: str, data: dict[str, object]) -> dict[str, object]:
        return {
            "call_id": call.call_id,
            "tool": call.tool,
            "status": status,
            "effect": effect,
            "revision": self.revision(),
            "data": data,
            "artifacts": [],
        }

    def reconcile(self, effect: PendingEffect) -> Reconciliation:
        return self.inner.reconcile(effect)
