"""The one reducer: ``apply(state, event)`` is how an event changes a run's state, the
loop's recorder applies every event it emits with it (``core.recording.emit``), and
``fold`` rebuilds a run's state from its log alone, to compare with the stored state
(``differences``; ``manage.py check_run_state``).

A fold starts from the run as it was created (``start``: its id, contract, limits,
actor, start time, base revision and policy version, which no event changes; the
deadline is the start plus the wall-time limit), then applies the log in seq order.
``run_started`` confirms the limits, the revision and the policy version.

What the events determine, and so what is compared:

- whether the run started, its limits and the policy version (``run_started``,
  ``policy_changed``);
- status, stop reason and stop message (``stopped``; ``approval_required`` and
  ``wait_ended`` for waits);
- the counters: proposals, and so the next call's number, and tool-call attempts
  (``proposed``, ``call_started``); when the last proposal arrived (``proposed``);
- the wait, and its clock: which call waits for which request, under which key,
  revision and policy version, since when, the time waited and so the deadline
  (``approval_required``, ``wait_ended``, ``stopped``);
- the revision (``run_started``, ``receipt_recorded``, ``evidence_cleared``,
  ``workspace_changed``, ``run_resumed``, ``effect_reconciled``);
- evidence: every check recorded, whole, and which are current (``evidence_recorded``,
  ``evidence_cleared``);
- pending effects and how each was resolved (``pending_effect_recorded``,
  ``effect_reconciled``);
- the changed paths (``receipt_recorded``, ``pending_effect_recorded``) and the
  external effects applied (``receipt_recorded``, ``effect_reconciled``);
- the calls (core.fold_calls): each call's record in the ledger, the operations, the
  call and the proposal in progress, the calls not performed and the feedback the
  proposer is shown next.

What is not compared (``NOT_EXPLAINED``): the proposer's own state, the model's
conversation, which only the proposer reads, stored as the proposer hands it over at
each checkpoint. A run whose ``run_started`` is of log version 1 (started before
the calls were on the record) is compared without its calls (``CALLS``).

docs/design.md, Events, says the same."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import assert_never

from core import events as ev
from core.contract import Limits
from core.fold_calls import apply_to_calls
from core.state import EvidenceRecord, PendingEffect, RunState, Waiting

NOT_EXPLAINED = frozenset({"proposer_state"})
CALLS = frozenset({"ledger", "not_performed", "operations", "current_call", "current_proposal", "feedback"})
# The log version whose events explain the calls (events.RunStarted.log_version).
LOG_VERSION = 2


@dataclass(frozen=True)
class Difference:
    part: str
    stored: object
    from_events: object

    def __str__(self) -> str:
        return f"{self.part}: the state says {self.stored!r}, the events say {self.from_events!r}"


def start(created: RunState) -> RunState:
    """The state a run was created with, from the parts of ``created`` no event changes."""
    return RunState(
        run_id=created.run_id,
        contract=created.contract,
        limits=created.limits,
        policy_version=created.policy_version,
        actor=created.actor,
        started_at=created.started_at,
        deadline=created.started_at + created.limits.wall_time_seconds,
        base_revision=created.base_revision,
        revision=created.base_revision,
    )


def fold(events: Iterable[ev.AnyEvent], created: RunState) -> RunState:
    """What a log, in seq order, says the state of the run ``created`` is."""
    state = start(created)
    for event in events:
        apply(state, event)
    return state


def apply(state: RunState, event: ev.AnyEvent) -> RunState:
    """``state`` changed by ``event``, in place: the calls first (core.fold_calls), then
    by the event's family; every match is exhaustive, so a new event type fails type
    checking until it is placed. Matched on the ``type`` literal, which narrows the
    event as a class pattern would: a class pattern that fails is an isinstance on a
    pydantic model (ABC's slow path, some 1,200 instructions), and an event went
    through some 30 of them here."""
    apply_to_calls(state, event)
    match event.type:
        case "run_started":
            state.run_started, state.policy_version = True, event.policy_version
            state.limits, state.revision = Limits.model_validate(event.limits), event.revision
        case "policy_changed":
            state.policy_version = event.new_version
        case "proposed":
            state.proposals, state.proposed_at = event.number, event.ts
            state.next_call += 1
        case "call_started":
            state.calls += 1
        case "approval_required" | "wait_ended" | "stopped":
            _apply_status(state, event)
        case "run_resumed" | "workspace_changed" | "receipt_recorded":
            _apply_workspace(state, event)
        case "evidence_recorded" | "evidence_cleared":
            _apply_evidence(state, event)
        case "pending_effect_recorded" | "effect_reconciled":
            _apply_effect(state, event)
        # The events that change nothing of the state the fold explains (see the module docstring).
        case (
            "invalid_input"
            | "secrets_found"
            | "denied"
            | "call_admitted"
            | "approval_consumed"
            | "approval_refused"
            | "approval_decided"
            | "approval_lapsed"
            | "duplicate_effect"
            | "changes_requested"
            | "invariant_repaired"
            | "kill_requested"
            | "retry"
            | "sandbox_waiting"
            | "sandbox_wait_over"
            # Written by the executor while a check runs, beside the loop's own events; what
            # the check reached is on its evidence (EvidenceRecorded.egress).
            | "egress_connection"
            | "egress_connections_omitted"
            | "check_required"
            | "write_blocked"
            | "model_note"
            # Written by the agent's driver beside the loop's events: the calls it made are the
            # loop's own proposals.
            | "agent_started"
            | "agent_ended"
        ):
            pass
        case _:
            assert_never(event)
    return state


def _apply_status(state: RunState, event: ev.ApprovalRequired | ev.WaitEnded | ev.Stopped) -> None:
    """The status, the stop and the wait, with its clock: time waiting for a human is
    not working time, so each wait that ends moves the deadline on."""
    match event.type:
        case "approval_required":
            assert event.call_id is not None
            state.status = "waiting_approval"
            state.waiting = Waiting(
                call_id=event.call_id,
                request_id=event.request_id,
                approval_key=event.key,
                revision=event.revision,
                policy_version=event.policy_version,
            )
            if state.waiting_since is None:
                state.waiting_since = event.ts
        case "wait_ended":
            # A wait that ends in a stop is followed by the stop itself.
            state.status, state.waiting, state.waiting_since = "running", None, None
            state.waited_seconds += event.waited_seconds
            state.deadline += event.waited_seconds
        case "stopped":
            state.waiting, state.waiting_since = None, None
            if event.status == "complete":
                state.status = "complete"
            else:
                state.status, state.stop_reason, state.stop_message = "stopped", event.status, event.message
        case _:
            assert_never(event)


def _apply_workspace(state: RunState, event: ev.RunResumed | ev.WorkspaceChanged | ev.ReceiptRecorded) -> None:
    """The revision as the harness reads it, the paths written and external effects applied."""
    match event.type:
        case "run_resumed":
            if event.revision is not None:
                state.revision = event.revision
        case "workspace_changed":
            state.revision = event.revision
        case "receipt_recorded":
            # A transient failure had no effect: the revision stays.
            if not event.valid or event.receipt_status() != "transient":
                state.revision = event.harness_revision
            _add_paths(state, event.wrote)
            if event.external:
                assert event.call_id is not None
                state.effects_applied.append(event.call_id)
        case _:
            assert_never(event)


def _add_paths(state: RunState, paths: list[str]) -> None:
    if paths:
        state.changed_paths = sorted(set(state.changed_paths) | set(paths))


def _apply_evidence(state: RunState, event: ev.EvidenceRecorded | ev.EvidenceCleared) -> None:
    match event.type:
        case "evidence_recorded":
            assert event.call_id is not None
            state.evidence.append(
                EvidenceRecord(
                    call_id=event.call_id,
                    check_id=event.check_id,
                    check_version=event.check_version,
                    command=list(event.command),
                    exit_code=event.exit_code,
                    timed_out=event.timed_out,
                    duration_ms=event.duration_ms,
                    image_digest=event.image_digest,
                    revision=event.revision,
                    policy_version=event.policy_version if event.policy_version is not None else state.policy_version,
                    output_ref=event.output_ref,
                    passed=event.passed,
                    ts=event.ts,
                    egress=list(event.egress),
                )
            )
            if event.current:
                state.current_evidence[event.check_id] = len(state.evidence) - 1
        case "evidence_cleared":
            state.current_evidence, state.revision = {}, event.revision
        case _:
            assert_never(event)


def _apply_effect(state: RunState, event: ev.PendingEffectRecorded | ev.EffectReconciled) -> None:
    match event.type:
        case "pending_effect_recorded":
            assert event.call_id is not None
            state.pending_effects.append(
                PendingEffect(
                    call_id=event.call_id,
                    tool=event.tool,
                    args=event.args,
                    kind=event.kind,
                    idempotency_key=event.idempotency_key,
                    reason=event.reason,
                    recorded_at=event.ts,
                )
            )
            _add_paths(state, event.wrote)
        case "effect_reconciled":
            if event.revision is not None:
                state.revision = event.revision
            # Also written for an interrupted write found not to have happened, which
            # was never a pending effect: then there is nothing to resolve.
            for effect in state.pending_effects:
                if effect.call_id == event.call_id and not effect.resolved:
                    effect.resolved, effect.applied, effect.resolution = True, event.applied, event.detail
                    if effect.kind == "external" and event.applied:
                        state.effects_applied.append(effect.call_id)
                    break
        case _:
            assert_never(event)


class StateNotExplained(AssertionError):
    """A stored state is not the one its event log folds to (raised where every
    checkpoint is checked: core.simulated.MemoryStore, and the Django store in tests)."""


def check_explained(state: RunState, events: Iterable[ev.AnyEvent]) -> None:
    found = differences(state, events)
    if found:
        raise StateNotExplained(f"run {state.run_id}: " + "; ".join(str(d) for d in found))


def differences(state: RunState, events: Iterable[ev.AnyEvent]) -> list[Difference]:
    """Where the stored state and its event log disagree, field by field (empty when
    the log explains it); ``NOT_EXPLAINED`` is left out, and ``CALLS`` for a log of
    version 1."""
    log = list(events)
    folded = fold(log, state)
    left_out = NOT_EXPLAINED
    if not any(isinstance(e, ev.RunStarted) and e.log_version >= LOG_VERSION for e in log):
        left_out = left_out | CALLS
    found = []
    for part in RunState.model_fields:
        if part in left_out:
            continue
        mine, theirs = getattr(state, part), getattr(folded, part)
        if mine != theirs:
            found.append(Difference(part, mine, theirs))
    return found
