"""Durable state: the run, its events, receipts, evidence and report live in the
database, and the log says what became of each call; a run reloaded after a crash at
any checkpoint continues correctly."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from core import events as ev
from core.fences import RowLock
from core.fold import fold
from core.ports import Store
from core.simulated import MemoryApprovals
from core.state import RunState
from runs.models import Event, Evidence, Receipt, Report, Run
from runs.persistence.store import DjangoStore, load_state
from runs.services import drive_run
from tests.helpers import SCRIPT, Crash, CrashingStore, World

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.postgres]


def create(world: World) -> Run:
    world.approvals = MemoryApprovals()
    return world.create()


def drive(run: Run, world: World, store: Store | None = None) -> RunState:
    run.refresh_from_db()
    return drive_run(run, world.environment(), world.approvals, store=store)


def finish(run: Run, world: World) -> RunState:
    """Drive to the end, granting the publish approval when asked."""
    state = drive(run, world)
    while state.status == "waiting_approval":
        assert state.waiting is not None
        world.approvals.grant(state.waiting.approval_key)
        state = drive(run, world)
    return state


def assert_log_is_whole(run: Run) -> None:
    seqs = list(Event.objects.filter(run=run).order_by("seq").values_list("seq", flat=True))
    assert seqs == list(range(1, len(seqs) + 1))
    run.refresh_from_db()
    assert run.last_seq == len(seqs)


def settled(run: Run) -> list[tuple[str, str]]:
    """Each call, in order, with its state in the ledger as the stored log leaves it
    after the call's last event (core.fold: the next proposal clears it away)."""
    log = [row.typed() for row in Event.objects.filter(run=run).order_by("seq")]
    created = load_state(run)
    calls = list(dict.fromkeys(event.call_id for event in log if event.call_id))
    ends = {call_id: max(at for at, event in enumerate(log) if event.call_id == call_id) for call_id in calls}
    return [(call_id, fold(log[: ends[call_id] + 1], created).ledger[call_id].state) for call_id in calls]


def test_it_stores_the_run_its_log_receipts_evidence_and_report() -> None:
    world = World()
    run = create(world)
    state = finish(run, world)
    assert state.outcome == "complete"
    run.refresh_from_db()
    assert run.status == "complete" and run.proposals == 5 and run.calls == 4
    assert_log_is_whole(run)
    assert settled(run) == [
        ("c1", "completed"),
        ("c2", "completed"),
        ("c3", "completed"),
        ("c4", "completed"),
        ("c5", "completed"),
    ]
    assert Receipt.objects.filter(run=run, valid=True).count() == 4
    evidence = Evidence.objects.get(run=run)
    assert evidence.passed and evidence.revision == state.revision and evidence.command[0] == "python3"
    report = Report.objects.get(run=run).data
    assert report["status"] == "complete" and report["changed_files"] == ["src/calc.py"]
    assert report["effects_applied"] == ["c4"]


def test_it_refuses_a_second_event_with_the_same_seq() -> None:
    from django.db import IntegrityError, transaction
    from django.utils import timezone

    world = World()
    run = create(world)
    finish(run, world)
    with pytest.raises(IntegrityError), transaction.atomic():
        Event.objects.create(run=run, seq=1, type="stopped", ts=timezone.now(), payload={})


def uninterrupted_checkpoints() -> int:
    world = World()
    run = create(world)
    counting = CrashingStore(crash_at=-1)
    state = drive(run, world, counting)
    assert state.waiting is not None
    world.approvals.grant(state.waiting.approval_key)
    drive(run, world, counting)
    return counting.count


CHECKPOINTS = 15  # in the uninterrupted run of SCRIPT, pinned by the test at the end


@pytest.mark.parametrize("crash_at", range(1, CHECKPOINTS + 1))
def test_it_continues_after_a_crash_at_any_checkpoint(crash_at: int) -> None:
    world = World()
    run = create(world)
    store = CrashingStore(crash_at)
    with pytest.raises(Crash):
        state = drive(run, world, store)
        assert state.waiting is not None
        world.approvals.grant(state.waiting.approval_key)
        drive(run, world, store)
    state = finish(run, world)
    run.refresh_from_db()
    assert_log_is_whole(run)
    # No external effect twice, no proposal counted twice.
    assert len(world.executor.outbox) <= 1
    assert state.proposals <= len(SCRIPT)
    types = list(Event.objects.filter(run=run).values_list("type", flat=True))
    assert types.count("run_started") == 1
    # An interrupted check is never taken as evidence: it runs again, so every run completes.
    assert state.outcome == "complete", state.stop_message
    assert state.passing_current("tests") is not None
    assert len(world.executor.outbox) == 1
    if "run_resumed" in types:
        first_resumed = Event.objects.filter(run=run, type="run_resumed").first()
        assert first_resumed is not None
        resumed = first_resumed.call_id
        assert resumed is not None and dict(settled(run))[resumed] != "started"


UNLEASED = RowLock("a test's driver without a lease")


class CrashAfterCheck(DjangoStore):
    """Dies as the check's receipt is about to be stored: the check was running."""

    def checkpoint(self, state: RunState, events: Sequence[ev.Event]) -> None:
        if any(isinstance(e, ev.ReceiptRecorded) and e.tool == "run_check" for e in events):
            raise Crash("crash with the check in flight")
        super().checkpoint(state, events)


def crash_then_finish(store: DjangoStore) -> tuple[RunState, list[tuple[str, str | None, Any]]]:
    """Drive a new run until ``store`` crashes it, then to the end; the final state
    and the run's events as (type, call id, payload)."""
    world = World()
    run = create(world)
    with pytest.raises(Crash):
        drive(run, world, store)
    state = finish(run, world)
    return state, list(Event.objects.filter(run=run).order_by("seq").values_list("type", "call_id", "payload"))


def test_it_runs_an_interrupted_check_again_under_the_same_call_and_completes() -> None:
    state, rows = crash_then_finish(CrashAfterCheck(UNLEASED))
    assert state.outcome == "complete", state.stop_message
    resumed = [(t, c) for t, c, _ in rows if t in ("run_resumed", "retry")]
    assert resumed == [("run_resumed", "c3"), ("retry", "c3")]
    started = [p["attempt"] for t, c, p in rows if t == "call_started" and c == "c3"]
    assert started == [1, 2]  # the same logical call, its second attempt counted
    admitted = [p["revision"] for t, c, p in rows if t == "call_admitted" and c == "c3"]
    assert len(admitted) == 2  # through the gates again, against the re-read revision
    assert Evidence.objects.get(run_id=state.run_id).call_id == "c3"
    assert state.proposals == len(SCRIPT)  # the proposer was not asked again for the check


class CrashBeforeWrite(DjangoStore):
    """Stores the write's intent ("started"), then dies before the write happens."""

    def checkpoint(self, state: RunState, events: Sequence[ev.Event]) -> None:
        super().checkpoint(state, events)
        if any(isinstance(e, ev.CallStarted) and e.tool == "write_file" for e in events):
            raise Crash("crash between the write's intent and the write")


def test_it_runs_a_write_again_when_the_workspace_shows_it_never_happened() -> None:
    state, rows = crash_then_finish(CrashBeforeWrite(UNLEASED))
    assert state.outcome == "complete", state.stop_message
    write = [
        (t, p.get("applied"))
        for t, c, p in rows
        if c == "c2" and t in ("run_resumed", "effect_reconciled", "retry", "pending_effect_recorded")
    ]
    assert write == [("run_resumed", None), ("effect_reconciled", False), ("retry", None)]
    assert [p["attempt"] for t, c, p in rows if t == "call_started" and c == "c2"] == [1, 2]
    assert state.pending_effects == [] and Evidence.objects.get(run_id=state.run_id).passed


def test_it_continues_exactly_where_it_stopped_when_loaded_by_another_process() -> None:
    world = World()
    run = create(world)
    state = drive(run, world)
    assert state.status == "waiting_approval"
    assert state.waiting is not None
    before = Run.objects.get(pk=run.pk).state
    world.approvals.grant(state.waiting.approval_key)
    resumed = drive(Run.objects.get(pk=run.pk), world)
    assert resumed.outcome == "complete"
    assert resumed.proposals == before["proposals"] + 1  # only the finish was new
    assert before["proposer_state"] == {"kind": "scripted", "position": 4}


def test_it_crashes_the_parametrised_runs_at_every_checkpoint_there_is() -> None:
    assert uninterrupted_checkpoints() == CHECKPOINTS
