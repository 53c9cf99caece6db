"""Typed run events. Each class is one event type with a ``type`` literal; the
store writes them in ``seq`` order and they are the run's audit trail, and the run's
state is what they fold to (core.fold). An event that settles a call the run never
admitted (denied, a duplicate, blocked, a check required, changes requested, the call
a stop fails, finish) carries the call's record as the gates left it, ``call``."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Annotated, Any, Literal, get_args

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, TypeAdapter, field_validator

from core.call_record import CallRecord
from core.errors import FieldProblem
from core.jsonutil import JSON


def _own_copy(call: object) -> object:
    """The record handed in is copied: the fold goes on changing the ledger's, and the
    event says what the record was when it was emitted. One read from a log is
    validated into a record of its own."""
    return call.model_copy(deep=True) if isinstance(call, CallRecord) else call


# A call's record as the event that settles the call leaves it (``call``): stored as
# the record dumps, read back as the record.
SettledCall = Annotated[CallRecord, BeforeValidator(_own_copy)]


class Event(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    run_id: str
    seq: int
    ts: float
    call_id: str | None = None

    @field_validator("ts")
    @classmethod
    def _to_the_microsecond(cls, ts: float) -> float:
        """The time as the store keeps it (to the microsecond), so a state that took
        an event's time (core.fold) equals the one its stored log gives."""
        return datetime.fromtimestamp(ts, tz=UTC).timestamp()

    def payload(self) -> dict[str, JSON]:
        """The event's own fields, as its dump gives them (the envelope is stored apart)."""
        if _dumped_as_is(type(self)):
            # A dump would copy each value and convert none (some 20,000 instructions
            # for a call's admission, four events a step): taken as they are.
            return {name: value for name, value in vars(self).items() if name not in _ENVELOPE}
        return self.model_dump(exclude=_ENVELOPE)


# What every event has, stored in columns of their own rather than in the payload.
_ENVELOPE = {"run_id", "seq", "ts", "call_id", "type"}


@functools.cache
def _dumped_as_is(cls: type[Event]) -> bool:
    """Whether no payload field of ``cls`` can hold a model or a dataclass, which its
    dump turns into a dict: its fields are then JSON values as they are."""
    return not any(_converted(field.annotation) for name, field in cls.model_fields.items() if name not in _ENVELOPE)


def _converted(annotation: object) -> bool:
    if isinstance(annotation, type) and (issubclass(annotation, BaseModel) or dataclasses.is_dataclass(annotation)):
        return True
    return any(_converted(arg) for arg in get_args(annotation))


class RunStarted(Event):
    type: Literal["run_started"] = "run_started"
    task_id: str
    policy_version: int
    revision: str
    limits: dict[str, int]
    clipped: dict[str, dict[str, int]]
    tools: list[str]
    # 2: every change to a call's record is an event's (core.fold_calls); a run started
    # before, whose log does not say so, is compared without its calls (core.fold).
    log_version: int = 1


class RunResumed(Event):
    type: Literal["run_resumed"] = "run_resumed"
    reason: str
    # The workspace's revision as the recovery found it, which the run goes on from.
    revision: str | None = None
    # What became of the call in flight: admitted again through the gates (it cannot
    # have had an effect), a pending effect to reconcile, or failed.
    recovery: Literal["retried", "pending", "failed"] | None = None


class Proposed(Event):
    """``proposal`` is the proposal as it came; one refused that is large or cannot be
    stored is kept as its ``summary`` instead (size, digest, head) and ``proposal`` is null."""

    type: Literal["proposed"] = "proposed"
    number: int
    proposal: JSON
    summary: dict[str, JSON] | None = None
    # Through gates 1-3 (parse, resolve, validate): the run holds it until its step ends.
    accepted: bool = False


class InvalidInput(Event):
    type: Literal["invalid_input"] = "invalid_input"
    gate: Literal["parse", "resolve", "validate"]
    problems: list[FieldProblem]


class SecretsFound(Event):
    """The secret scan of an external call's change found something
    (core.publish_gate): each finding's file, line, kind and fingerprint, never the
    secret. ``refuse`` settles the call (the model is told ``problems``: where each
    is); ``ask`` files the request, whose page shows the findings above the diff."""

    type: Literal["secrets_found"] = "secrets_found"
    tool: str
    findings: list[dict[str, JSON]]
    # Findings the policy's allowlist excused (file and fingerprint).
    allowed: list[dict[str, JSON]] = Field(default_factory=list)
    decision: Literal["refuse", "ask"]
    reason: str
    policy_version: int
    problems: list[FieldProblem] = Field(default_factory=list)
    # For a refusal: the call's record as the refusal leaves it.
    call: SettledCall | None = None


class Denied(Event):
    type: Literal["denied"] = "denied"
    tool: str
    rule: str
    reason: str
    policy_version: int | None = None
    # The call's record as the denial leaves it (none for a tool outside the contract).
    call: SettledCall | None = None


class CallAdmitted(Event):
    type: Literal["call_admitted"] = "call_admitted"
    tool: str
    tool_version: str
    args: dict[str, JSON]
    decision: str
    rule: str
    revision: str
    policy_version: int | None = None
    # An external call's fixed effect (core.effects), what the executor performs.
    effect: dict[str, JSON] | None = None
    idempotency_key: str | None = None
    # An external effect: its operation is on the record from now on (core.state.Operation).
    external: bool = False


class ApprovalRequired(Event):
    type: Literal["approval_required"] = "approval_required"
    tool: str
    args: dict[str, JSON]
    revision: str
    policy_version: int
    key: str
    rule: str
    request_id: str
    # The external effect the reviewer is asked about, fixed when the request is filed.
    effect: dict[str, JSON] | None = None
    idempotency_key: str | None = None


class ApprovalConsumed(Event):
    type: Literal["approval_consumed"] = "approval_consumed"
    key: str
    request_id: str


class ApprovalRefused(Event):
    type: Literal["approval_refused"] = "approval_refused"
    key: str
    request_id: str
    reason: str


class ApprovalDecided(Event):
    type: Literal["approval_decided"] = "approval_decided"
    request_id: str
    decision: Literal["granted", "denied", "changes_requested"]
    by: str
    reason: str
    # The decider started the run (only possible when the policy allows self-approval):
    # no second person was involved, and the audit trail says so.
    self_approved: bool = False
    # A grant toward a quorum: the distinct people who have granted so far, of those
    # needed; the request is granted only once ``grants`` reaches ``needed``.
    grants: int = 1
    needed: int = 1
    # The digest of exactly what the approval page showed the decider (the canonical
    # bytes of runs.approval_flow.shown), which the decision's ledger entry records;
    # "" for a decision recorded before the ledger.
    shown: str = ""
    # The API token the decider decided through (its label), "" for the page.
    via: str = ""


class ApprovalLapsed(Event):
    """A request that can no longer be decided or used: expired, stale, or
    cancelled because its run stopped."""

    type: Literal["approval_lapsed"] = "approval_lapsed"
    request_id: str
    status: Literal["expired", "stale", "cancelled"]
    reason: str


class WaitEnded(Event):
    """The run left ``waiting_approval`` (core.lifecycle.WAIT_EXITS)."""

    type: Literal["wait_ended"] = "wait_ended"
    request_id: str
    exit: Literal["granted", "denied", "changes_requested", "expired", "stale", "cancelled"]
    run: Literal["running", "stopped"]
    reason: str
    waited_seconds: float
    total_waited_seconds: float


class DuplicateEffect(Event):
    """An external effect identical to one already applied or still unresolved:
    nothing is performed and nobody is asked."""

    type: Literal["duplicate_effect"] = "duplicate_effect"
    tool: str
    idempotency_key: str
    of_call: str
    status: str
    call: SettledCall | None = None


class ChangesRequested(Event):
    """A reviewer asked for changes instead of the call: it is not performed, and the
    model is shown the reviewer's words (``repeated``: the identical call proposed
    again, shown the same words without asking anyone)."""

    type: Literal["changes_requested"] = "changes_requested"
    tool: str
    key: str
    request_id: str
    message: str
    by: str
    repeated: bool = False
    call: SettledCall | None = None


class PolicyChanged(Event):
    """The run's gates decide under a newer policy version from now on."""

    type: Literal["policy_changed"] = "policy_changed"
    old_version: int
    new_version: int


class InvariantRepaired(Event):
    """The beat's sweep found a row breaking an invariant (docs/design.md, Lifecycle) and
    repaired it."""

    type: Literal["invariant_repaired"] = "invariant_repaired"
    invariant: str
    repair: str
    request_id: str | None = None


class KillRequested(Event):
    type: Literal["kill_requested"] = "kill_requested"
    by: str
    # "project": the run's project's operators stopped all its runs.
    scope: Literal["run", "project", "global"]
    reason: str = ""  # the operator's words, optional
    # The API token's label when the operator killed through the API ("" otherwise).
    via: str = ""


class CallStarted(Event):
    type: Literal["call_started"] = "call_started"
    tool: str
    attempt: int
    idempotency_key: str | None


class ReceiptRecorded(Event):
    type: Literal["receipt_recorded"] = "receipt_recorded"
    tool: str
    attempt: int
    valid: bool
    problem: str | None = None
    receipt: JSON
    harness_revision: str
    # What the receipt settles beyond itself: the workspace paths it wrote (the run's
    # changed paths) and whether it applied an external effect (its effects applied).
    wrote: list[str] = Field(default_factory=list)
    external: bool = False

    def receipt_status(self) -> JSON:
        """The status the receipt states (None if it states none). An invalid receipt
        is kept as it came, so its status may be anything."""
        return self.receipt.get("status") if isinstance(self.receipt, dict) else None


class Retry(Event):
    type: Literal["retry"] = "retry"
    attempt: int
    backoff_seconds: float
    reason: str
    # Why the attempt before failed transiently, which the result tells the model (none
    # for a call retried after a crash).
    transient_reason: str | None = None


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


class EgressConnection(Event):
    """One connection a check made, or tried to make, through the egress proxy
    (sandbox/egress/proxy.py), recorded when it ends: where to, whether the check's policy
    let it through (``reason`` says why not), and the bytes each way."""

    type: Literal["egress_connection"] = "egress_connection"
    check_id: str
    host: str
    port: int
    allowed: bool
    reason: str
    # "CONNECT" (a tunnel, usually TLS) or the method of a plain HTTP request.
    method: str
    bytes_out: int
    bytes_in: int
    duration_ms: int


class EgressConnectionsOmitted(Event):
    """The connections of one check call past the per-call bound on events
    (HARNESS_EGRESS_MAX_EVENTS_PER_CALL), counted rather than recorded one by one,
    written once when the call ends; ``limit`` is the bound that applied."""

    type: Literal["egress_connections_omitted"] = "egress_connections_omitted"
    check_id: str
    limit: int
    connections: int
    allowed: int
    refused: int
    bytes_out: int
    bytes_in: int


class EgressSummary(BaseModel):
    """What one check reached through the proxy, per destination: the evidence shows
    it, so a reviewer sees which destinations a check that passed depended on."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    host: str
    port: int
    allowed: bool
    connections: int
    bytes_out: int
    bytes_in: int
    # Why the proxy refused it (the first refusal's reason), so a check that failed
    # for want of a destination says so to the model and the reviewer; "" if allowed.
    reason: str = ""


class EvidenceRecorded(Event):
    type: Literal["evidence_recorded"] = "evidence_recorded"
    check_id: str
    check_version: str
    passed: bool
    exit_code: int | None
    revision: str
    current: bool
    # The rest of the evidence record, as the run keeps it.
    command: list[str] = Field(default_factory=list)
    timed_out: bool = False
    duration_ms: int = 0
    image_digest: str = ""
    policy_version: int | None = None
    output_ref: str | None = None
    # Where the check connected through the egress proxy (empty: it had no network).
    egress: list[EgressSummary] = Field(default_factory=list)


class EvidenceCleared(Event):
    type: Literal["evidence_cleared"] = "evidence_cleared"
    old_revision: str
    revision: str
    checks: list[str]


class WorkspaceChanged(Event):
    """A full read of the workspace found it at another revision than the run had
    (a change that came around the harness's tools)."""

    type: Literal["workspace_changed"] = "workspace_changed"
    old_revision: str
    revision: str


class CheckRequired(Event):
    type: Literal["check_required"] = "check_required"
    revision: str
    missing: list[str]
    for_tool: str
    call: SettledCall | None = None


class PendingEffectRecorded(Event):
    type: Literal["pending_effect_recorded"] = "pending_effect_recorded"
    tool: str
    kind: Literal["workspace", "external"]
    idempotency_key: str | None
    reason: str
    args: dict[str, JSON] = Field(default_factory=dict)
    # The workspace paths the effect may have written (the run's changed paths).
    wrote: list[str] = Field(default_factory=list)


class EffectReconciled(Event):
    type: Literal["effect_reconciled"] = "effect_reconciled"
    applied: bool
    detail: str
    # A workspace effect's: the revision the workspace was found at.
    revision: str | None = None


class WriteBlocked(Event):
    type: Literal["write_blocked"] = "write_blocked"
    tool: str
    pending: list[str]
    call: SettledCall | None = None


class ModelNote(Event):
    type: Literal["model_note"] = "model_note"
    kind: str
    detail: dict[str, JSON]


class AgentStarted(Event):
    """An outside agent's process started in the run's agent container (issue 41):
    which preset, which version of it said ``--version``, from which image."""

    type: Literal["agent_started"] = "agent_started"
    preset: str
    version: str
    image: str


class AgentEnded(Event):
    """The agent's process ended: its exit code (None when it was killed or timed out),
    why, and the artifacts holding its transcript (stdout) and stderr. ``problem``
    says, for ``failed``, why the agent could not start or could not work (its MCP
    connection failed); empty otherwise and on an event written before it was told."""

    type: Literal["agent_ended"] = "agent_ended"
    preset: str
    exit_code: int | None
    reason: Literal["exited", "killed", "deadline", "failed"]
    duration_ms: int
    artifacts: list[str] = []
    problem: str = ""


class Stopped(Event):
    type: Literal["stopped"] = "stopped"
    status: str
    message: str
    # The call that fails with the stop (or, for ``complete``, finish), as it leaves it.
    call: SettledCall | None = None
    # The outcome as every reader tells it (core.outcome): its machine name (``status``
    # unless the run finished with something asked of it undone) and its words. Empty
    # on a stop recorded before outcomes were told.
    outcome: str = ""
    said: str = ""


AnyEvent = (
    RunStarted
    | RunResumed
    | Proposed
    | InvalidInput
    | SecretsFound
    | Denied
    | CallAdmitted
    | ApprovalRequired
    | ApprovalConsumed
    | ApprovalRefused
    | ApprovalDecided
    | ApprovalLapsed
    | WaitEnded
    | DuplicateEffect
    | ChangesRequested
    | PolicyChanged
    | InvariantRepaired
    | KillRequested
    | CallStarted
    | ReceiptRecorded
    | Retry
    | SandboxWaiting
    | SandboxWaitOver
    | EgressConnection
    | EgressConnectionsOmitted
    | EvidenceRecorded
    | EvidenceCleared
    | WorkspaceChanged
    | CheckRequired
    | PendingEffectRecorded
    | EffectReconciled
    | WriteBlocked
    | ModelNote
    | AgentStarted
    | AgentEnded
    | Stopped
)
"""Every event type. Readers ``match`` on it and end with ``assert_never``, so a new
type is a type error in every reader until each says what it does with it."""

_adapter: TypeAdapter[AnyEvent] = TypeAdapter(Annotated[AnyEvent, Field(discriminator="type")])


@functools.cache
def type_name(cls: type[Event]) -> str:
    """The name an event class is stored and sent under (its ``type`` literal). Looked
    up once per class: pydantic's ``model_fields`` on a class is some 5 µs a read, and
    every event stored asks."""
    name: str = cls.model_fields["type"].default
    return name


def field_name(cls: type[Event], name: str) -> str:
    """``name``, checked to be one of ``cls``'s payload fields: for a reader that must name
    a field where no typed event is at hand (a lookup the database runs in one
    statement). Called where the reader's module is imported, so a field renamed or
    removed stops the import (and every test) instead of the lookup matching nothing."""
    if name not in cls.model_fields or name in Event.model_fields or name == "type":
        raise LookupError(f"{cls.__name__} has no payload field {name!r}")
    return name


def parse_event(record: Mapping[str, Any]) -> AnyEvent:
    """The typed event of a stored record (``runs.models.Event.as_dict()`` shape:
    run_id, seq, type, call_id, ts as a timestamp, a datetime or ISO 8601, payload).

    An unknown type or a payload that does not fit its class raises
    ``pydantic.ValidationError`` naming the field: nothing is guessed."""
    ts = record["ts"]
    if isinstance(ts, str):
        ts = datetime.fromisoformat(ts)
    if isinstance(ts, datetime):
        ts = ts.timestamp()
    fields = {"run_id": str(record["run_id"]), "seq": record["seq"], "ts": ts, "type": record["type"], "call_id": record.get("call_id")}
    return _adapter.validate_python({**record["payload"], **fields})
