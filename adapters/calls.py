"""The model's side of the exchange as the adapters hold it: a tool call the model
sent, the tool result sent back, and one model reply."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass

from core.jsonutil import JSON


@dataclass(frozen=True)
class ToolCall:
    """A tool call as the model sent it. ``args`` is the parsed object, or the raw
    text when it was not valid JSON (``args_error`` says why): the parse and validate
    gates report it, not the adapter."""

    id: str
    name: str
    args: JSON
    args_error: str | None = None

    def to_json(self) -> dict[str, JSON]:
        return {"id": self.id, "name": self.name, "args": self.args, "args_error": self.args_error}

    @classmethod
    def from_json(cls, raw: Mapping[str, JSON]) -> ToolCall:
        error = raw.get("args_error")
        return cls(str(raw["id"]), str(raw["name"]), raw.get("args"), error if isinstance(error, str) else None)


@dataclass(frozen=True)
class ToolResult:
    call_id: str
    content: str
    is_error: bool

    def to_json(self) -> dict[str, JSON]:
        return {"call_id": self.call_id, "content": self.content, "is_error": self.is_error}

    @classmethod
    def from_json(cls, raw: Mapping[str, JSON]) -> ToolResult:
        return cls(str(raw["call_id"]), str(raw["content"]), bool(raw.get("is_error")))


def parse_arguments(raw: object) -> tuple[JSON, str | None]:
    """Arguments as the model wrote them: parsed JSON, or the raw text plus the reason."""
    if not isinstance(raw, str):
        return raw, None
    if not raw.strip():
        return {}, None
    try:
        return json.loads(raw, parse_constant=_refuse_constant), None
    except ValueError as exc:
        return raw, f"the arguments are not valid JSON ({exc})"


def _refuse_constant(name: str) -> float:
    raise ValueError(f"{name} is not JSON")


@dataclass(frozen=True)
class ModelReply:
    """One model response, already in the provider's message format."""

    assistant: dict[str, JSON]
    text: str
    calls: list[ToolCall]
    input_tokens: int | None
    output_tokens: int | None
    stop_reason: str | None = None
