"""The harness's base: the run's state and its ports, how every outcome is recorded
(events, checkpoints, the step's feedback, stops) and the controls, one method each so
a test can show each is load-bearing. ``core.loop.Harness`` drives a run on top
of it, with ``core.execution`` (gates 8-10: execute, receipt check, observe;
pending effects, recovery) and ``core.waits`` (waiting for reviewers)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from core import events as ev
from core import feedback as fb
from core import storable
from core.jsonutil import JSON
from core.lifecycle import WAIT_EXITS, WaitExit
from core.policy import Authorization, Policy, authorize
from core.ports import ApprovalGate, ArtifactStore, Clock, Controls, Executor, PolicySource, Proposer, Store, Workspace
from core.receipts import Receipt, check_receipt
from core.state import TERMINAL_STATES, CallRecord, Operation, PendingEffect, RunState
from core.tools import Registry, ToolSpec


@dataclass(frozen=True)
class HarnessConfig:
    retry_base_seconds: float = 0.5
    retry_max_seconds: float = 30.0


class Stop(Exception):
    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


def no_retry(reason: str, message: str, infrastructure: str | None) -> Stop:
    """The stop when a transient failure cannot be retried: when the sandbox's own
    infrastructure kept failing, the outcome names it rather than the limit that
    ended the retries (the call itself never failed)."""
    if infrastructure is None:
        return Stop(reason, message)
    return Stop("sandbox_unavailable", f"the sandbox kept failing ({infrastructure}); {message}")


class Driver:
    """What every part of the harness works on; ``Harness.__init__`` sets it."""

    state: RunState
    registry: Registry
    policy: Policy
    proposer: Proposer
    executor: Executor
    workspace: Workspace
    approvals: ApprovalGate
    store: Store
    artifacts: ArtifactStore
    clock: Clock
    controls: Controls
    config: HarnessConfig
    policies: PolicySource | None
    _events: list[ev.Event]
    _wait_just_ended: float

    # -- recording ---------------------------------------------------------------

    def _emit(self, cls: type[ev.Event], call_id: str | None = None, **fields: Any) -> None:
        # seq 0: the store numbers events as it writes them, after any written outside the loop.
        self._events.append(cls(run_id=self.state.run_id, seq=0, ts=self.clock.now(), call_id=call_id, **fields))

    def _checkpoint(self) -> None:
        # The proposer's snapshot holds the model's own words (the conversation): text
        # it cannot store is kept escaped; a snapshot escaping cannot mend raises
        # Unstorable, and the run is stopped from its last stored state (runs.runtime).
        self.state.proposer_state = storable.escaped(self.proposer.snapshot(), "the proposer's state")
        events, self._events = self._events, []
        self.store.checkpoint(self.state, events)
        self._prune_ledger()

    def _prune_ledger(self) -> None:
        """Settled calls were just checkpointed with their final state; keep only the
        report's summary of them."""
        state = self.state
        for call_id, record in list(state.ledger.items()):
            if record.state not in TERMINAL_STATES or call_id == state.current_call:
                continue
            if record.state == "failed":
                state.not_performed.append({"call_id": call_id, "tool": record.tool, "state": record.state})
            del state.ledger[call_id]

    def _emit_model_notes(self) -> None:
        for note in self.proposer.notes():
            kind = storable.escaped_text(str(note.get("kind", "note")))
            detail = storable.escaped({k: v for k, v in note.items() if k != "kind"}, "the model's note")
            self._emit(ev.ModelNote, call_id=self.state.current_call, kind=kind, detail=detail)

    def _end_step(self, feedback: fb.Feedback) -> None:
        self.state.feedback = feedback.to_json()
        self.state.current_call = None
        self.state.current_proposal = None
        self._checkpoint()

    def _guard(self, where: str, infrastructure: str | None = None) -> None:
        if self.controls.kill_requested():
            raise Stop("killed", f"kill switch ({where})")
        if self.clock.now() >= self.state.deadline:
            message = f"wall-time limit of {self.state.limits.wall_time_seconds}s reached ({where})"
            raise no_retry("deadline", message, infrastructure)

    def _stop(self, reason: str, message: str) -> None:
        state = self.state
        if state.waiting is not None:
            self._emit_wait_ended("cancelled", message)
        state.status = "stopped"
        state.stop_reason = reason
        state.stop_message = message
        state.waiting = None
        state.waiting_since = None
        self._emit(ev.Stopped, call_id=state.current_call, status=reason, message=message)
        state.current_call = None
        state.current_proposal = None
        self._checkpoint()
        self._close_requests(f"the run stopped: {reason}")

    def _close_requests(self, reason: str) -> None:
        """A run that ended leaves nothing in the reviewers' queue (a pending request
        belongs to a waiting run: docs/design.md, Lifecycle). The gate records each
        cancellation; this runs after the final checkpoint, so a crash in between
        leaves it to the sweep."""
        self.approvals.cancel_open(self.state.run_id, reason)

    def _emit_wait_ended(self, exit: WaitExit, reason: str) -> None:
        state = self.state
        assert state.waiting is not None
        self._emit(
            ev.WaitEnded,
            call_id=state.waiting.call_id,
            request_id=state.waiting.request_id,
            exit=exit,
            run=WAIT_EXITS[exit].run,
            reason=reason,
            waited_seconds=round(self._wait_just_ended, 3),
            total_waited_seconds=round(state.waited_seconds, 3),
        )

    def _set_revision(self, revision: str, *, cleared_by_write: bool) -> None:
        state = self.state
        if revision == state.revision and not cleared_by_write:
            return
        if state.current_evidence:
            self._emit(ev.EvidenceCleared, old_revision=state.revision, revision=revision, checks=sorted(state.current_evidence))
        state.current_evidence = {}
        state.revision = revision

    def _admit(self, record: CallRecord, spec: ToolSpec) -> None:
        """Gates 4-7 (authorize, effects already known, evidence, approval:
        ``Harness._admit``), which a call goes through again when a wait for it ends
        or it is retried after a crash."""
        raise NotImplementedError

    # -- the controls, one method each so a test can show each is load-bearing --

    def _proposal_budget_left(self) -> bool:
        return self.state.proposals < self.state.limits.max_proposals

    def _validate(self, spec: ToolSpec, args: dict[str, JSON]) -> dict[str, JSON]:
        return self.registry.validate(spec, args, self.state.contract.allowed_write_paths)

    def _authorize(self, spec: ToolSpec, args: Mapping[str, JSON]) -> Authorization:
        return authorize(self.policy, spec.name, args)

    def _missing_evidence(self) -> list[str]:
        return self.state.missing_checks()

    def _blocking_effects(self) -> list[PendingEffect]:
        return self.state.unresolved_effects()

    def _already_done(self, record: CallRecord) -> Operation | None:
        """The same external effect applied, under way or of unknown outcome (only one
        known not to have happened may be performed again)."""
        done = self.state.operations.get(record.idempotency_key or "")
        if done is None or done.status == "not_applied" or done.call_id == record.call_id:
            return None
        return done

    def _attempts_left(self, record: CallRecord) -> bool:
        return record.attempts < self.state.limits.max_attempts

    def _infrastructure_failure(self, receipt: Receipt) -> str | None:
        return receipt.infrastructure

    def _check_receipt(self, raw: object, record: CallRecord, spec: ToolSpec, harness_revision: str) -> Receipt:
        return check_receipt(raw, record.call_id, spec.name, harness_revision)
