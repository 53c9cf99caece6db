"""Persisting the core's state: ``DjangoStore.checkpoint`` writes the run state, the
step's events and the relational copies (receipts, evidence, report) in one
transaction.

On PostgreSQL a checkpoint is one statement: the UPDATE of the run row that fences,
locks, numbers the events and writes the state, as a common table expression of the
events' multi-row INSERT and of one INSERT or upsert per projection the step touched.
Elsewhere those are a statement each (no round trips to save in SQLite). No
savepoints and no reads: the checkpoint is all or nothing, so nothing inside it
needs to roll back alone."""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import nullcontext
from datetime import datetime
from operator import is_

from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, DataError, connections

from common.hot_settings import now as _now
from common.redact import MaskedHead, MaskedJSON, secret_values
from core.errors import FieldProblem
from core.events import Event as CoreEvent
from core.events import EvidenceRecorded, ReceiptRecorded
from core.fences import Fence, Lease
from core.fold import check_explained
from core.report import build_report
from core.state import RunState, load_stored_state
from core.storable import Unstorable
from ledger.writer import batch as ledger_batch
from runs.models import Event, Evidence, Receipt, Report, Run
from runs.persistence.eventlog import LeaseLost, append_events
from runs.persistence.rows import PayloadOf, Rows, SeqOf
from runs.scheduling.slots import run_ended

__all__ = ["DjangoStore", "LeaseLost", "StateText", "Unstorable", "load_state", "state_columns"]

# What a value the databases or the encoders cannot take raises while a checkpoint
# is written: the same value fails every time, so none of these is worth a retry.
UNSTORABLE_ERRORS = (ValueError, TypeError, UnicodeError, RecursionError, DataError)


def state_columns(state: RunState, state_text: StateText) -> dict[str, object]:
    return {
        "state": state_text(state),
        "status": state.status,
        "outcome": state.outcome,
        "stop_message": state.stop_message,
        "revision": state.revision,
        "proposals": state.proposals,
        "calls": state.calls,
        "updated_at": _now(),
    }


class StateText:
    """The state as the masked JSON text the run row stores, serialised by pydantic's
    own encoder: the text ``model_dump_json()`` gives, masked. What the state holds
    from outside was made storable before it got there (core.storable); anything else
    fails the checkpoint.

    Its head, the leading fields set when the run is created and started (``_HEAD``),
    is dumped and scanned for secrets once while the state holds the very same objects
    in them, and only the rest at each checkpoint (some 40% of the text less to dump
    and scan). Kept by identity, which is safe: an int and a string do not change, a
    Contract and its Limits are frozen models (core.contract.Strict) that the fold
    replaces, never changes (core.fold: ``start``, ``run_started``; nothing changes a
    contract's lists in place, and a fold that did would store a stale head, which
    ``check_stored`` reports throughout the test suite), and the objects are held here,
    so no other object can take the place of one. Another run, state or contract is
    another object, hence a new head; its verdict is kept with the secrets it was
    reached with (common.redact.MaskedHead). One per store (a run's driver), one head
    at a time: nothing else is kept, so nothing is shared across runs or processes."""

    __slots__ = ("_kept",)

    def __init__(self) -> None:
        # The head's objects and its text, set together.
        self._kept: tuple[tuple[object, ...], MaskedHead] | None = None

    def __call__(self, state: RunState) -> MaskedJSON:
        of = (state.schema_version, state.run_id, state.contract, state.limits)
        kept = self._kept
        if kept is None or not all(map(is_, of, kept[0])):
            # {"schema_version":..,"limits":{..}} -> {"schema_version":..,"limits":{..},
            kept = self._kept = (of, MaskedHead(_STATE_JSON(state, include=_HEAD).decode()[:-1] + ","))
        # {"policy_version":..} -> "policy_version":..}
        return kept[1].masked(_STATE_JSON(state, exclude=_HEAD).decode()[1:], secret_values())


# The model's serializer itself (pydantic's documented ``__pydantic_serializer__``), the
# text ``model_dump_json()`` gives: that method's dozen default options passed through
# Python were some 10,000 instructions of each checkpoint's 80,000.
_STATE_JSON = RunState.__pydantic_serializer__.to_json
# The state's leading fields, which only the run's creation and start set (StateText).
_HEAD = {"schema_version", "run_id", "contract", "limits"}


class DjangoStore:
    def __init__(self, fence: Fence) -> None:
        self.fence = fence
        self._written: dict[str, object] = {}  # the run row's columns as this store last committed them
        self._state_text = StateText()

    def checkpoint(self, state: RunState, events: Sequence[CoreEvent]) -> None:
        """Write the step, or raise ``LeaseLost`` (fenced out: nothing written) or
        ``Unstorable`` (a value no database takes: nothing written, and writing it
        again would fail the same way; the driver stops the run instead)."""
        try:
            columns = self._changed(state_columns(state, self._state_text))
            # State, events and their projections land together or not at all: a crash
            # between them would otherwise resume from a state the log does not explain.
            # The step's decisions are the ledger's in the same transaction, written at its
            # end, after the run's and its project's rows are locked (ledger.writer); or, but
            # for a run's end (which locks its project's row after), in the one statement.
            # Looked up once for the whole checkpoint: each lookup is a context-local read
            # (about 10,000 instructions).
            connection = connections[DEFAULT_DB_ALIAS]
            # A run that goes on writes nothing after its events: their transaction is
            # append_events' own (on PostgreSQL most often one statement alone).
            alone = not state.finished and not connection.in_atomic_block
            with nullcontext() if alone else ledger_batch(savepoint=False, joinable=not state.finished, connection=connection):
                # Fencing rides on the numbering UPDATE: a worker whose lease was taken
                # over gets LeaseLost before it has written anything.
                append_events(
                    state.run_id,
                    events,
                    run_columns=columns,
                    fence=self.fence,
                    projections=_project(state, events),
                    connection=connection,
                    alone=alone,
                )
                if state.finished:
                    # The run's slot in its project goes back with its end, or not at all.
                    run_ended(state.run_id)
                if isinstance(self.fence, Lease):
                    # Alone, committed already: at once.
                    connection.on_commit(lambda: self._written.update(columns))
        except UNSTORABLE_ERRORS as exc:
            said = f"{type(exc).__name__}: {exc}".splitlines()[0][:300]
            raise Unstorable([FieldProblem("(checkpoint)", said)]) from exc
        if settings.HARNESS_VERIFY_FOLD:
            check_stored(state.run_id)

    def _changed(self, columns: dict[str, object]) -> dict[str, object]:
        """The columns to assign. While its lease token holds, this store is the only
        writer of the run row's copies of the state (any other driver takes the
        lease, and a new token, first; the fenced UPDATE then fails), so a column
        still holding what this store last committed is left out: assigning an
        indexed column (status, outcome) rewrites its index entries even when the
        value is the same, three pages more in every SQLite commit."""
        if not isinstance(self.fence, Lease):
            return columns
        return {name: value for name, value in columns.items() if name not in self._written or self._written[name] != value}


def _project(state: RunState, events: Sequence[CoreEvent]) -> list[Rows]:
    """The relational copies of what this step changed: its receipts and evidence,
    and the report of a run that ended."""
    now = _now()
    projections = [Rows(Receipt, _receipt_rows(state.run_id, events)), Rows(Evidence, _evidence_rows(state, events, now))]
    if state.finished:
        projections.append(Rows(Report, [{"run": state.run_id, "data": build_report(state), "created_at": now}], ("run",), ("data",)))
    return projections


def _receipt_rows(run_id: str, events: Sequence[CoreEvent]) -> list[dict[str, object]]:
    return [
        {
            "run": run_id,
            "call_id": event.call_id,
            "attempt": event.attempt,
            "valid": event.valid,
            "problem": event.problem or "",
            # None is SQL's NULL, as the field writes it, not JSON's null.
            "body": None if event.receipt is None else PayloadOf(index, "receipt"),
            "harness_revision": event.harness_revision,
            "event_seq": SeqOf(index),
        }
        for index, event in enumerate(events)
        # type(), not isinstance: each other event's failed isinstance takes ABC's slow path.
        if type(event) is ReceiptRecorded
    ]


def _evidence_rows(state: RunState, events: Sequence[CoreEvent], now: datetime) -> list[dict[str, object]]:
    """The evidence records this step's events announce, from the state (the latest
    record of each call)."""
    rows: list[dict[str, object]] = []
    for event in events:
        if type(event) is not EvidenceRecorded:  # not isinstance, as in _receipt_rows
            continue
        record = next(e for e in reversed(state.evidence) if e.call_id == event.call_id)
        rows.append(
            {
                "run": state.run_id,
                "call_id": record.call_id,
                "check_id": record.check_id,
                "check_version": record.check_version,
                "command": record.command,
                "exit_code": record.exit_code,
                "timed_out": record.timed_out,
                "duration_ms": record.duration_ms,
                "image_digest": record.image_digest,
                "revision": record.revision,
                "policy_version": record.policy_version,
                "output_ref": record.output_ref,
                "passed": record.passed,
                "recorded_at": now,
            }
        )
    return rows


def check_stored(run_id: str) -> None:
    """The stored state is what the stored log folds to, every field (core.fold), or
    ``StateNotExplained``: after each checkpoint where ``HARNESS_VERIFY_FOLD`` is on
    (the test suite and every process it starts), so every run the suite makes is
    checked as it goes, on both databases."""
    log = [row.typed() for row in Event.objects.filter(run_id=run_id).order_by("seq")]
    check_explained(load_state(Run.objects.only("state").get(pk=run_id)), log)


def load_state(run: Run) -> RunState:
    """The run's state in the current shape, whichever schema version stored it."""
    return load_stored_state(run.state)
