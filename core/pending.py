"""Effects of unknown outcome: recorded, reconciled by looking them up, and recovered
after a crash (docs/design.md, Recovery)."""

from __future__ import annotations

from core import events as ev
from core.call_record import CallRecord
from core.context import RunContext, guard
from core.decisions import Regate, Stop
from core.recording import checkpoint, clear_evidence, emit
from core.tools import ToolSpec


def record_pending(run: RunContext, record: CallRecord, spec: ToolSpec | None, reason: str) -> None:
    """``spec`` is None for a tool the registry no longer has (an MCP server that did
    not list it at this pickup): an effect that had its idempotency key, so external."""
    kind = "external" if spec is None or spec.external_effect else "workspace"
    emit(
        run,
        ev.PendingEffectRecorded,
        call_id=record.call_id,
        tool=record.tool,
        kind=kind,
        idempotency_key=record.idempotency_key,
        reason=reason,
        args=record.args,
        wrote=spec.written_paths(record.args) if spec is not None and spec.writes_workspace else [],
    )


def reconcile_pending(run: RunContext) -> Stop | None:
    """Look up each effect of unknown outcome; the stop when one conflicts with
    what somebody else did."""
    state = run.state
    changed = False
    for effect in state.unresolved_effects():
        try:
            result = run.executor.reconcile(effect)
        except Exception:  # noqa: BLE001, S112 - a failed lookup leaves the outcome unknown, never "failed"
            continue
        if result.conflict:
            return Stop("effect_conflict", f"{effect.call_id}: {result.detail}")
        if not result.resolved:
            continue
        changed = True
        revision = None
        if effect.kind == "workspace":
            revision = run.workspace.revision()
            clear_evidence(run, state.revision, revision, by_write=bool(result.applied))
        emit(run, ev.EffectReconciled, call_id=effect.call_id, applied=bool(result.applied), detail=result.detail, revision=revision)
    if changed:
        checkpoint(run)
    return None


def recover_in_flight(run: RunContext) -> Regate | Stop | None:
    """A call still marked 'started' means the previous driver died during it: its
    outcome is unknown until reconciled, whatever the chat history says.

    The call in progress runs again (admitted anew through the gates, against the
    re-read revision, as its next attempt within the attempts, the call budget
    and the deadline) when it cannot have had an effect: a check, or a workspace
    write that provably did not happen because the workspace is still at the
    revision it had before the call. Anything else becomes a pending effect."""
    state = run.state
    interrupted = [r for r in state.ledger.values() if r.state == "started"]
    if not interrupted:
        return None
    old, revision = state.revision, run.workspace.revision()
    again: Regate | None = None
    for record in interrupted:
        spec = run.registry.get(record.tool)
        reason = f"recovered: {record.tool} attempt {record.attempts} was in flight"
        current = record.call_id == state.current_call
        unwritten = spec is not None and spec.writes_workspace and not spec.external_effect and revision == record.revision_before
        if spec is not None and current and (not spec.has_effect or unwritten):
            emit(run, ev.RunResumed, call_id=record.call_id, reason=reason, revision=revision, recovery="retried")
            if unwritten:
                detail = "the workspace is at the revision it had before the call: the write did not happen"
                emit(run, ev.EffectReconciled, call_id=record.call_id, applied=False, detail=detail)
            # The gates decide again on a working copy (core.loop).
            again = Regate(record.model_copy(deep=True), spec)
            continue
        # Either way the proposer is told the call was interrupted (core.fold_calls).
        # A tool gone from the registry (its MCP server did not list it now) whose
        # call had an operation key was an external effect: pending, not failed.
        pending = spec.has_effect if spec is not None else record.idempotency_key is not None
        emit(run, ev.RunResumed, call_id=record.call_id, reason=reason, revision=revision, recovery="pending" if pending else "failed")
        if pending:
            record_pending(run, record, spec, "the worker stopped during the call")
    clear_evidence(run, old, revision, by_write=False)
    checkpoint(run)
    conflict = reconcile_pending(run)
    if conflict is not None:
        return conflict
    if again is not None:
        reason = "interrupted: the worker stopped during the attempt"
        emit(run, ev.Retry, call_id=again.record.call_id, attempt=again.record.attempts, backoff_seconds=0.0, reason=reason)
        guard(run, "before retrying an interrupted call")
    return again
