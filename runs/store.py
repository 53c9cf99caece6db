"""Persisting the core's state: ``DjangoStore.checkpoint`` writes the run state, the
step's events and the relational copies (ledger, receipts, evidence, pending
effects, report) in one transaction."""

from __future__ import annotations

from collections.abc import Sequence

from django.db import transaction
from django.utils import timezone

from runs.core.events import Event as CoreEvent
from runs.core.report import build_report
from runs.core.state import RunState
from runs.eventlog import append_events
from runs.models import CallLedgerEntry, Evidence, PendingEffect, Receipt, Report, Run


class LeaseLost(Exception):
    """Another worker holds the run now; this one must stop writing."""


def state_columns(state: RunState) -> dict[str, object]:
    return {
        "state": state.model_dump(mode="json"),
        "status": state.status,
        "outcome": state.outcome,
        "stop_message": state.stop_message,
        "revision": state.revision,
        "proposals": state.proposals,
        "calls": state.calls,
        "updated_at": timezone.now(),
    }


class DjangoStore:
    def __init__(self, lease_token: int | None = None) -> None:
        self.lease_token = lease_token

    def checkpoint(self, state: RunState, events: Sequence[CoreEvent]) -> None:
        # State, events and their projections land together or not at all: a crash
        # between them would otherwise resume from a state the log does not explain.
        with transaction.atomic(savepoint=False):
            query = Run.objects.filter(pk=state.run_id)
            if self.lease_token is not None:
                # Fencing: a worker whose lease was taken over writes nothing more.
                query = query.filter(lease_token=self.lease_token)
            if query.update(**state_columns(state)) != 1:
                raise LeaseLost(f"run {state.run_id}: lease token {self.lease_token} is no longer current")
            rows = append_events(state.run_id, events)
            _project(state, events, [row.seq for row in rows])


def _project(state: RunState, events: Sequence[CoreEvent], seqs: list[int]) -> None:
    run_id = state.run_id
    touched = {e.call_id for e in events if e.call_id}
    entries = [
        CallLedgerEntry(
            run_id=run_id,
            call_id=record.call_id,
            tool=record.tool,
            args=record.args,
            state=record.state,
            attempts=record.attempts,
            idempotency_key=record.idempotency_key,
            decision=record.decision or "",
            rule=record.rule or "",
            updated_at=timezone.now(),
        )
        for call_id in sorted(touched)
        if (record := state.ledger.get(call_id)) is not None
    ]
    CallLedgerEntry.objects.bulk_create(
        entries,
        update_conflicts=True,
        unique_fields=["run", "call_id"],
        update_fields=["state", "attempts", "idempotency_key", "decision", "rule", "updated_at"],
    )
    for event, seq in zip(events, seqs, strict=True):
        data = event.model_dump()
        if data["type"] == "receipt":
            Receipt.objects.create(
                run_id=run_id,
                call_id=event.call_id,
                attempt=data["attempt"],
                valid=data["valid"],
                problem=data["problem"] or "",
                body=data["receipt"],
                harness_revision=data["harness_revision"],
                event_seq=seq,
            )
        elif data["type"] == "evidence_recorded":
            record = next(e for e in reversed(state.evidence) if e.call_id == event.call_id)
            Evidence.objects.create(
                run_id=run_id,
                call_id=record.call_id,
                check_id=record.check_id,
                check_version=record.check_version,
                command=record.command,
                exit_code=record.exit_code,
                timed_out=record.timed_out,
                duration_ms=record.duration_ms,
                image_digest=record.image_digest,
                revision=record.revision,
                policy_version=record.policy_version,
                output_ref=record.output_ref,
                passed=record.passed,
                recorded_at=timezone.now(),
            )
    for effect in state.pending_effects:
        if effect.call_id in touched:
            PendingEffect.objects.update_or_create(
                run_id=run_id,
                call_id=effect.call_id,
                defaults={
                    "tool": effect.tool,
                    "args": effect.args,
                    "kind": effect.kind,
                    "idempotency_key": effect.idempotency_key,
                    "reason": effect.reason,
                    "resolved": effect.resolved,
                    "applied": effect.applied,
                    "resolution": effect.resolution or "",
                },
            )
    if state.finished:
        Report.objects.update_or_create(run_id=run_id, defaults={"data": build_report(state)})


def load_state(run: Run) -> RunState:
    return RunState.model_validate(run.state)
