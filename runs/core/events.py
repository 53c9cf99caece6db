"""Typed run events. Each class is one event type with a ``type`` literal; the
store writes them in ``seq`` order and they are the run's audit trail."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

from runs.core.jsonutil import JSON


class Event(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    run_id: str
    seq: int
    ts: float
    call_id: str | None = None

    def payload(self) -> dict[str, JSON]:
        return self.model_dump(exclude={"run_id", "seq", "ts", "call_id", "type"})


class RunStarted(Event):
    type: Literal["run_started"] = "run_started"
    task_id: str
    policy_version: int
    revision: str
    limits: dict[str, int]
    clipped: dict[str, dict[str, int]]
    tools: list[str]


class RunResumed(Event):
    type: Literal["run_resumed"] = "run_resumed"
    reason: str


class Proposed(Event):
    type: Literal["proposed"] = "proposed"
    number: int
    proposal: JSON


class InvalidInput(Event):
    type: Literal["invalid_input"] = "invalid_input"
    gate: Literal["parse", "resolve", "validate"]
    problems: list[dict[str, str]]


class Denied(Event):
    type: Literal["denied"] = "denied"
    tool: str
    rule: str
    reason: str


class CallAdmitted(Event):
    type: Literal["call_admitted"] = "call_admitted"
    tool: str
    tool_version: str
    args: dict[str, JSON]
    decision: str
    rule: str
    revision: str


class ApprovalRequired(Event):
    type: Literal["approval_required"] = "approval_required"
    tool: str
    args: dict[str, JSON]
    revision: str
    policy_version: int
    key: str
    rule: str
    request_id: str


class ApprovalConsumed(Event):
    type: Literal["approval_consumed"] = "approval_consumed"
    key: str
    request_id: str


class ApprovalRefused(Event):
    type: Literal["approval_denied"] = "approval_denied"
    key: str
    request_id: str
    reason: str


class ApprovalDecided(Event):
    type: Literal["approval_decided"] = "approval_decided"
    request_id: str
    decision: Literal["granted", "denied"]
    by: str
    reason: str


class ApprovalLapsed(Event):
    """A request that can no longer be decided or used: expired or stale."""

    type: Literal["approval_lapsed"] = "approval_lapsed"
    request_id: str
    status: Literal["expired", "stale"]
    reason: str


class KillRequested(Event):
    type: Literal["kill_requested"] = "kill_requested"
    by: str
    scope: Literal["run", "global"]
    reason: str = ""  # the operator's words, optional


class CallStarted(Event):
    type: Literal["call_started"] = "call_started"
    tool: str
    attempt: int
    idempotency_key: str | None


class ReceiptRecorded(Event):
    type: Literal["receipt"] = "receipt"
    tool: str
    attempt: int
    valid: bool
    problem: str | None = None
    receipt: JSON
    harness_revision: str


class Retry(Event):
    type: Literal["retry"] = "retry"
    attempt: int
    backoff_seconds: float
    reason: str


class EvidenceRecorded(Event):
    type: Literal["evidence_recorded"] = "evidence_recorded"
    check_id: str
    check_version: str
    passed: bool
    exit_code: int | None
    revision: str
    current: bool


class EvidenceCleared(Event):
    type: Literal["evidence_cleared"] = "evidence_cleared"
    old_revision: str
    revision: str
    checks: list[str]


class CheckRequired(Event):
    type: Literal["check_required"] = "check_required"
    revision: str
    missing: list[str]
    for_tool: str


class PendingEffectRecorded(Event):
    type: Literal["pending_effect"] = "pending_effect"
    tool: str
    kind: Literal["workspace", "external"]
    idempotency_key: str | None
    reason: str


class EffectReconciled(Event):
    type: Literal["effect_reconciled"] = "effect_reconciled"
    applied: bool
    detail: str


class WriteBlocked(Event):
    type: Literal["write_blocked"] = "write_blocked"
    tool: str
    pending: list[str]


class ModelNote(Event):
    type: Literal["model"] = "model"
    kind: str
    detail: dict[str, JSON]


class Stopped(Event):
    type: Literal["stop"] = "stop"
    status: str
    message: str


AnyEvent = Annotated[
    RunStarted
    | RunResumed
    | Proposed
    | InvalidInput
    | Denied
    | CallAdmitted
    | ApprovalRequired
    | ApprovalConsumed
    | ApprovalRefused
    | ApprovalDecided
    | ApprovalLapsed
    | KillRequested
    | CallStarted
    | ReceiptRecorded
    | Retry
    | EvidenceRecorded
    | EvidenceCleared
    | CheckRequired
    | PendingEffectRecorded
    | EffectReconciled
    | WriteBlocked
    | ModelNote
    | Stopped,
    Field(discriminator="type"),
]
_adapter: TypeAdapter[Any] = TypeAdapter(AnyEvent)


def event_from_record(run_id: str, seq: int, ts: float, type_: str, call_id: str | None, payload: dict[str, JSON]) -> Event:
    """Rebuild a typed event from its stored columns (unknown types fail loudly)."""
    event: Event = _adapter.validate_python({"run_id": run_id, "seq": seq, "ts": ts, "type": type_, "call_id": call_id, **payload})
    return event


EVENT_TYPES: frozenset[str] = frozenset(cls.model_fields["type"].default for cls in Event.__subclasses__())
