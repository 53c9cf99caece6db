"""The recorder: how every outcome is put on the record. An event changes the run's
state as ``core.fold.apply`` says (nothing else changes it), and waits in the run
context until the next checkpoint stores it with the state; a stop, the end of a
wait and a revision read from the workspace each have one function here."""

from __future__ import annotations

from typing import Any, TypeVar, cast

from core import events as ev
from core import storable
from core.call_record import CallRecord
from core.context import RunContext
from core.fold import apply
from core.lifecycle import WAIT_EXITS, WaitExit
from core.outcome import said_at_stop

E = TypeVar("E", bound=ev.Event)


def emit(run: RunContext, cls: type[E], /, call_id: str | None = None, **fields: Any) -> E:
    """Record an event and apply it to the run's state: what the log says is what the state is."""
    # seq 0: the store numbers events as it writes them, after any written outside the loop.
    # Validated from one dict: a model's keyword constructor costs some 7,000 instructions more.
    event = cls.model_validate({"run_id": run.state.run_id, "seq": 0, "ts": run.clock.now(), "call_id": call_id, **fields})
    apply(run.state, cast(ev.AnyEvent, event))
    run.unsaved.append(event)
    return event


def checkpoint(run: RunContext) -> None:
    # The proposer's snapshot holds the model's own words (the conversation): text
    # it cannot store is kept escaped; a snapshot escaping cannot mend raises
    # Unstorable, and the run is stopped from its last stored state (runs.runtime).
    run.state.proposer_state = storable.escaped(run.proposer.snapshot(), "the proposer's state")
    events, run.unsaved = run.unsaved, []
    run.store.checkpoint(run.state, events)


def emit_model_notes(run: RunContext) -> None:
    for note in run.proposer.notes():
        kind = storable.escaped_text(str(note.get("kind", "note")))
        detail = storable.escaped({k: v for k, v in note.items() if k != "kind"}, "the model's note")
        emit(run, ev.ModelNote, call_id=run.state.current_call, kind=kind, detail=detail)


def stop(run: RunContext, reason: str, message: str, fails: CallRecord | None = None) -> None:
    """The run stops; ``fails`` is the call that fails with it."""
    state = run.state
    if state.waiting is not None:
        emit_wait_ended(run, "cancelled", message)
    emit(run, ev.Stopped, call_id=state.current_call, status=reason, message=message, call=fails, **said_at_stop(state, reason, message))
    checkpoint(run)
    close_requests(run, f"the run stopped: {reason}")


def close_requests(run: RunContext, reason: str) -> None:
    """A run that ended leaves nothing in the reviewers' queue (a pending request
    belongs to a waiting run: docs/design.md, Lifecycle). The gate records each
    cancellation; this runs after the final checkpoint, so a crash in between
    leaves it to the sweep."""
    run.approvals.cancel_open(run.state.run_id, reason)


def emit_wait_ended(run: RunContext, exit: WaitExit, reason: str) -> None:
    state = run.state
    assert state.waiting is not None
    waited, run.wait_just_ended = run.wait_just_ended, 0.0
    emit(
        run,
        ev.WaitEnded,
        call_id=state.waiting.call_id,
        request_id=state.waiting.request_id,
        exit=exit,
        run=WAIT_EXITS[exit].run,
        reason=reason,
        waited_seconds=round(waited, 3),
        total_waited_seconds=round(state.waited_seconds + waited, 3),
    )


def clear_evidence(run: RunContext, old: str, new: str, *, by_write: bool) -> None:
    """Evidence is current only on the revision it checked: none is once the revision
    moved from ``old`` to ``new``, or a write may have changed what was checked. The
    revision itself moves with the event that says why (the receipt, the reconciled
    effect, the recovery, the workspace read)."""
    if (new != old or by_write) and run.state.current_evidence:
        emit(run, ev.EvidenceCleared, old_revision=old, revision=new, checks=sorted(run.state.current_evidence))


def read_workspace(run: RunContext, revision: str) -> None:
    """The revision a full read of the workspace found: one that moved came around the
    harness's tools, and is on the record."""
    old = run.state.revision
    if revision != old:
        emit(run, ev.WorkspaceChanged, old_revision=old, revision=revision)
    clear_evidence(run, old, revision, by_write=False)
