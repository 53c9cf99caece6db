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
    policy_version: int | None = None


class CallAdmitted(Event):
    type: Literal["call_admitted"] = "call_admitted"
    tool: str
    tool_version: str
    args: dict[str, JSON]
    decision: str
    rule: str
    revision: str
    policy_version: int | None = None


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
    # The decider started the run (only possible when the policy allows self-approval):
    # no second person was involved, and the audit trail says so.
    self_approved: bool = False


class ApprovalLapsed(Event):
    """A request that can no longer be decided or used: expired, stale, or
    cancelled because its run stopped."""

    type: Literal["approval_lapsed"] = "approval_lapsed"
    request_id: str
    status: Literal["expired", "stale", "cancelled"]
    reason: str


class WaitEnded(Event):
    """The run left ``waiting_approval`` (runs.core.lifecycle.WAIT_EXITS)."""

    type: Literal["wait_ended"] = "wait_ended"
    request_id: str
    exit: Literal["granted", "denied", "expired", "stale", "cancelled"]
    run: Literal["running", "stopped"]
    reason: str
    waited_seconds: float
    total_waited_seconds: float


class DuplicateEffect(Event):
    """An external effect identical to one already applied or still unresolved:
    nothing is performed and nobody is asked."""

    type: Literal["duplicate"] = "duplicate"
    tool: str
    idempotency_key: str
    of_call: str
    status: str


class PolicyChanged(Event):
    """The run's gates decide under a newer policy version from now on."""

    type: Literal["policy_changed"] = "policy_changed"
    old_version: int
    new_version: int


class InvariantRepaired(Event):
    """The beat's sweep found a row breaking an invariant of DESIGN section 6 and
    repaired it."""

    type: Literal["invariant_repaired"] = "invariant_repaired"
    invariant: str
    repair: str
    request_id: str | None = None


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


class SandboxWaiting(Event):
    """The sandbox engine does not answer: the attempt in progress waits for it, until
    ``until`` at most (the run's deadline or the wait limit); the kill switch still works."""

    type: Literal["sandbox_waiting"] = "sandbox_waiting"
    reason: str
    until: float


class SandboxWaitOver(Event):
    type: Literal["sandbox_wait_over"] = "sandbox_wait_over"
    engine_back: bool
    waited_seconds: float
    detail: str


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
    | WaitEnded
    | DuplicateEffect
    | PolicyChanged
    | InvariantRepaired
    | KillRequested
    | CallStarted
    | ReceiptRecorded
    | Retry
    | SandboxWaiting
    | SandboxWaitOver
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
