"""The part of a run's state its event log explains, rebuilt from the events alone,
and the differences from the stored state (``manage.py check_run_state``).

What the events determine, and so what is compared:

- status, stop reason and stop message (``stopped``; ``approval_required`` and
  ``wait_ended`` for waits);
- the counters: proposals (``proposed``) and tool-call attempts (``call_started``);
- whether the run started (``run_started``), and the policy version the gates
  decide under (``run_started``, ``policy_changed``);
- the wait: which call waits for which request, under which key, revision and
  policy version (``approval_required``, ``wait_ended``, ``stopped``);
- evidence: every check recorded and which are current (``evidence_recorded``,
  ``evidence_cleared``);
- pending effects and how each was resolved (``pending_effect_recorded``,
  ``effect_reconciled``).

What they do not determine, and so is not compared: the revision (it moves
without an event when no evidence is current), waiting time (a wait that goes on
re-opens its clock without an event), the ledger (settled calls leave it), the
operations, the changed paths, the deadline, the feedback and the proposer's own
state. docs/design.md, Events, says the same."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, fields
from typing import assert_never

from core import events as ev
from core.state import RunState, RunStatus, Waiting


@dataclass(frozen=True)
class CheckFact:
    call_id: str
    check_id: str
    check_version: str
    passed: bool
    exit_code: int | None
    revision: str


@dataclass(frozen=True)
class EffectFact:
    call_id: str
    tool: str
    kind: str
    idempotency_key: str | None
    reason: str
    resolved: bool = False
    applied: bool | None = None
    resolution: str | None = None


@dataclass
class Explained:
    """The parts of a ``RunState`` that events explain. ``policy_version`` is None
    when the log has no ``run_started`` (a run stopped before it started)."""

    run_started: bool = False
    status: RunStatus = "running"
    stop_reason: str | None = None
    stop_message: str = ""
    proposals: int = 0
    calls: int = 0
    policy_version: int | None = None
    waiting: Waiting | None = None
    evidence: list[CheckFact] = field(default_factory=list)
    current_evidence: dict[str, int] = field(default_factory=dict)
    pending_effects: list[EffectFact] = field(default_factory=list)


@dataclass(frozen=True)
class Difference:
    part: str
    stored: object
    from_events: object

    def __str__(self) -> str:
        return f"{self.part}: the state says {self.stored!r}, the events say {self.from_events!r}"


def fold(events: Iterable[ev.AnyEvent]) -> Explained:
    """What a log, in seq order, says about its run."""
    out = Explained()
    for event in events:
        _apply(out, event)
    return out


# The events that change nothing of what is compared: see the module docstring.
_Silent = (
    ev.RunResumed
    | ev.InvalidInput
    | ev.Denied
    | ev.CallAdmitted
    | ev.ApprovalConsumed
    | ev.ApprovalRefused
    | ev.ApprovalDecided
    | ev.ApprovalLapsed
    | ev.DuplicateEffect
    | ev.InvariantRepaired
    | ev.KillRequested
    | ev.ReceiptRecorded
    | ev.Retry
    | ev.SandboxWaiting
    | ev.SandboxWaitOver
    | ev.CheckRequired
    | ev.WriteBlocked
    | ev.ModelNote
)


def _apply(out: Explained, event: ev.AnyEvent) -> None:
    """One event's part, by its family; every match is exhaustive, so a new event type
    fails type checking until it is placed."""
    if isinstance(event, _Silent):
        return
    match event:
        case ev.RunStarted():
            out.run_started, out.policy_version = True, event.policy_version
        case ev.PolicyChanged():
            out.policy_version = event.new_version
        case ev.Proposed():
            out.proposals = event.number
        case ev.CallStarted():
            out.calls += 1
        case ev.ApprovalRequired() | ev.WaitEnded() | ev.Stopped():
            _apply_status(out, event)
        case ev.EvidenceRecorded() | ev.EvidenceCleared():
            _apply_evidence(out, event)
        case ev.PendingEffectRecorded() | ev.EffectReconciled():
            _apply_effect(out, event)
        case _:
            assert_never(event)


def _apply_status(out: Explained, event: ev.ApprovalRequired | ev.WaitEnded | ev.Stopped) -> None:
    """The status, the stop and the wait."""
    match event:
        case ev.ApprovalRequired():
            assert event.call_id is not None
            out.status = "waiting_approval"
            out.waiting = Waiting(
                call_id=event.call_id,
                request_id=event.request_id,
                approval_key=event.key,
                revision=event.revision,
                policy_version=event.policy_version,
            )
        case ev.WaitEnded():
            # A wait that ends in a stop is followed by the stop itself.
            out.status, out.waiting = "running", None
        case ev.Stopped():
            out.waiting = None
            if event.status == "complete":
                out.status = "complete"
            else:
                out.status, out.stop_reason, out.stop_message = "stopped", event.status, event.message
        case _:
            assert_never(event)


def _apply_evidence(out: Explained, event: ev.EvidenceRecorded | ev.EvidenceCleared) -> None:
    match event:
        case ev.EvidenceRecorded():
            assert event.call_id is not None
            out.evidence.append(
                CheckFact(event.call_id, event.check_id, event.check_version, event.passed, event.exit_code, event.revision)
            )
            if event.current:
                out.current_evidence[event.check_id] = len(out.evidence) - 1
        case ev.EvidenceCleared():
            out.current_evidence = {}
        case _:
            assert_never(event)


def _apply_effect(out: Explained, event: ev.PendingEffectRecorded | ev.EffectReconciled) -> None:
    match event:
        case ev.PendingEffectRecorded():
            assert event.call_id is not None
            out.pending_effects.append(EffectFact(event.call_id, event.tool, event.kind, event.idempotency_key, event.reason))
        case ev.EffectReconciled():
            # Also written for an interrupted write found not to have happened, which
            # was never a pending effect: then there is nothing to resolve.
            for index, effect in enumerate(out.pending_effects):
                if effect.call_id == event.call_id and not effect.resolved:
                    out.pending_effects[index] = EffectFact(
                        effect.call_id, effect.tool, effect.kind, effect.idempotency_key, effect.reason, True, event.applied, event.detail
                    )
                    break
        case _:
            assert_never(event)


def explained_by_state(state: RunState) -> Explained:
    """The same parts, as the stored state has them."""
    return Explained(
        run_started=state.run_started,
        status=state.status,
        stop_reason=state.stop_reason,
        stop_message=state.stop_message,
        proposals=state.proposals,
        calls=state.calls,
        policy_version=state.policy_version,
        waiting=state.waiting,
        evidence=[CheckFact(e.call_id, e.check_id, e.check_version, e.passed, e.exit_code, e.revision) for e in state.evidence],
        current_evidence=dict(state.current_evidence),
        pending_effects=[
            EffectFact(p.call_id, p.tool, p.kind, p.idempotency_key, p.reason, p.resolved, p.applied, p.resolution)
            for p in state.pending_effects
        ],
    )


def differences(state: RunState, events: Iterable[ev.AnyEvent]) -> list[Difference]:
    """Where the stored state and its event log disagree (empty when the log explains it)."""
    stored, folded = explained_by_state(state), fold(events)
    found = []
    for part in (f.name for f in fields(Explained)):
        if part == "policy_version" and folded.policy_version is None:
            continue
        mine, theirs = getattr(stored, part), getattr(folded, part)
        if mine != theirs:
            found.append(Difference(part, mine, theirs))
    return found
