"""The model's side of the exchange as the adapters hold it: a tool call the model
sent, the tool result sent back, and one model reply."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass

from core import storable
from core.jsonutil import JSON
from core.proposals import MAX_PROPOSAL_BYTES


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


UNREAD = "(arguments Harness could not read)"


def parse_arguments(raw: object) -> tuple[JSON, str | None]:
    """Arguments as the model wrote them (text, or the object a client parsed): the
    JSON value, or text plus the reason it is not read. Not read: text that is not JSON,
    a value nested deeper than a stored one may be (``storable.MAX_DEPTH``; Python's
    parser gives up near 1,000 levels with RecursionError) or larger than a proposal
    may be. Either would otherwise stop the run far from here (the checkpoint refuses
    it): the model is told instead, and the answer uses a proposal. Text too large is
    cut to its head, an object that cannot be kept is replaced by ``UNREAD``."""
    if isinstance(raw, str):
        if len(raw) > MAX_PROPOSAL_BYTES:
            return raw[: storable.HEAD_CHARS], _not_json(f"{len(raw)} characters; at most {MAX_PROPOSAL_BYTES}")
        if not raw.strip():
            return {}, None
        try:
            value = json.loads(raw, parse_constant=_refuse_constant)
        except RecursionError:
            return raw, _not_json(f"nested more than {storable.MAX_DEPTH} levels deep")
        except ValueError as exc:
            return raw, _not_json(str(exc))
    else:
        value = raw
    found = storable.problems(value, max_bytes=MAX_PROPOSAL_BYTES)
    if found:
        return raw if isinstance(raw, str) else UNREAD, _not_json(found[0].message)
    return value, None


def _not_json(reason: str) -> str:
    return f"the arguments are not valid JSON ({reason})"


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
    # Why the response could not be read at all (the client's parse gave up), if so.
    unread: str | None = None


UNREAD_REPLY = "(an answer Harness could not read)"


def unreadable_reply(reason: str) -> ModelReply:
    """What stands for a response the provider's client could not parse: no tool call
    (its ids are in what was not read), its tokens estimated, and why, for the model."""
    return ModelReply({"role": "assistant", "content": UNREAD_REPLY}, UNREAD_REPLY, [], None, None, unread=reason)
