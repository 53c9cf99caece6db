"""On PostgreSQL a checkpoint's one decision is written by the checkpoint's own statement
(ledger.writer.joining): the run row locked first, the heads after it, in a batch that
locks nothing after that statement. Against the real server, with writers side by side:
every chain verifies, no writer deadlocks, each decision has exactly one entry, and a
checkpoint rolled back leaves none."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator

import pytest
from django.db import connection, connections

import ledger.writer as writer
from core import events as ev
from core.fences import RowLock
from ledger.export import verify_stored
from ledger.models import Entry, Head
from ledger.writer import Decision, Shown, batch, record, system
from projects.models import default_project_id
from runs.models import Event, Run
from runs.persistence.eventlog import append_events
from runs.persistence.signals import locks_after
from tests.helpers import World, admitted

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.postgres_only]


@pytest.fixture
def joined(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[bool]]:
    """What each checkpoint's ``Joined.written`` answered: True where its own statement
    wrote its decision's entry."""
    answers: list[bool] = []
    written = writer.Joined.written

    def counted(self: writer.Joined, entries: int) -> bool:
        answer = written(self, entries)
        answers.append(answer)
        return answer

    monkeypatch.setattr(writer.Joined, "written", counted)
    yield answers


def checkpoint(run_id: str, event: ev.Event) -> None:
    """A checkpoint's transaction as runs.persistence.store writes a step of a run that goes on."""
    with batch(savepoint=False, joinable=True):
        append_events(run_id, [event], fence=RowLock("a test's driver"))


def decided_seqs(run_id: str) -> list[int]:
    """The seq of the event each of the run's entries records."""
    return sorted(int(json.loads(decided)["seq"]) for decided in Entry.objects.filter(run_id=run_id).values_list("decided", flat=True))


def deciding_seqs(run_id: str) -> list[int]:
    kinds = ["call_admitted", "kill_requested"]
    return sorted(Event.objects.filter(run_id=run_id, type__in=kinds).values_list("seq", flat=True))


def test_it_writes_a_checkpoints_decision_in_its_statement_kept_prepared(joined: list[bool]) -> None:
    run_id = str(World().create().pk)
    for n in range(6):
        checkpoint(run_id, admitted(run_id, n))
    # The first checkpoint of a run this process has not numbered the log of has no seqs
    # to decide on ahead; every later one writes its entry itself.
    assert joined == [True] * 5, joined
    assert decided_seqs(run_id) == deciding_seqs(run_id)
    assert verify_stored() is None
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_prepared_statements WHERE statement LIKE %s", ["%ledger_entries%"])
        assert cursor.fetchone()[0] == 1


def test_it_leaves_no_entry_of_a_checkpoint_rolled_back(joined: list[bool]) -> None:
    run_id = str(World().create().pk)
    checkpoint(run_id, admitted(run_id, 0))
    heads = list(Head.objects.order_by("chain").values_list("chain", "seq", "digest"))
    entries = Entry.objects.count()
    with pytest.raises(RuntimeError), batch(savepoint=False, joinable=True):
        append_events(run_id, [admitted(run_id, 1)], fence=RowLock("a test's driver"))
        raise RuntimeError("the checkpoint fails after its statement")
    assert joined == [True], joined
    assert Entry.objects.count() == entries
    assert list(Head.objects.order_by("chain").values_list("chain", "seq", "digest")) == heads
    # The next checkpoint's seqs are not the ones the rolled back one left: its statement
    # writes no entry (its decision is recorded at its batch's end), the next one's does.
    checkpoint(run_id, admitted(run_id, 2))
    checkpoint(run_id, admitted(run_id, 3))
    assert joined == [True, False, True], joined
    assert decided_seqs(run_id) == deciding_seqs(run_id)
    assert verify_stored() is None


def test_it_joins_no_checkpoint_whose_listener_may_lock_rows_after_it(joined: list[bool]) -> None:
    run_id = str(World().create().pk)
    checkpoint(run_id, admitted(run_id, 0))
    asked = ev.ApprovalRequired(
        run_id=run_id,
        seq=0,
        ts=time.time(),
        call_id="c1",
        tool="write_file",
        args={"path": "src/calc.py", "content": ""},
        revision="r0",
        policy_version=1,
        rule="writes need review",
        request_id="r1",
        key="k1",
        idempotency_key="i1",
    )
    # A reviewer's mail is locked when the request is filed (notifications.mail).
    assert any(locks(asked) for locks in locks_after)
    assert not any(locks(admitted(run_id, 2)) for locks in locks_after)
    checkpoint(run_id, asked)
    checkpoint(run_id, admitted(run_id, 2))
    # The request's entry was written at its batch's end; the admission after it in its statement.
    assert joined == [True], joined
    assert Entry.objects.filter(run_id=run_id, kind="gate.asked").count() == 1
    assert verify_stored() is None


def test_it_chains_checkpoints_of_one_project_written_at_once_with_reviewers_and_admins(joined: list[bool]) -> None:
    world = World()
    runs = [str(world.create().pk) for _ in range(3)]
    project = default_project_id()
    steps = 8
    failures: list[BaseException] = []
    start = threading.Barrier(len(runs) + 2)

    def thread(work: Callable[[], None]) -> threading.Thread:
        def body() -> None:
            try:
                start.wait(timeout=30)
                work()
            except BaseException as exc:  # every failure is the test's
                failures.append(exc)
            finally:
                connections.close_all()

        return threading.Thread(target=body)

    def driver(run_id: str) -> Callable[[], None]:
        def drive() -> None:
            for n in range(steps):
                checkpoint(run_id, admitted(run_id, n))

        return drive

    def reviewer() -> None:
        # An operator's decision on each run: its row locked by the numbering UPDATE, its
        # entry written at its batch's end, between the drivers' checkpoints.
        for _ in range(2):
            for run_id in runs:
                with batch():
                    append_events(
                        run_id, [ev.KillRequested(run_id=run_id, seq=0, ts=time.time(), by="op", scope="run")], fence=RowLock("op")
                    )

    def admin() -> None:
        # A decision about every run of the project ("stop all"): their rows locked first, the heads at the end.
        for n in range(3):
            with batch():
                list(Run.objects.select_for_update().filter(pk__in=runs).order_by("pk").values_list("pk", flat=True))
                record(Decision("admin.stopped_all", system("admin"), {"n": n}, Shown.of({"n": n}), project_id=project))

    threads = [thread(driver(run_id)) for run_id in runs] + [thread(reviewer), thread(admin)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads), "a writer is still waiting"
    assert failures == [], failures
    assert verify_stored() is None
    for run_id in runs:
        assert decided_seqs(run_id) == deciding_seqs(run_id), run_id
        assert len(deciding_seqs(run_id)) == steps + 2
    assert Entry.objects.filter(kind="admin.stopped_all").count() == 3
    # Most checkpoints wrote their entry in their own statement (the first of each run
    # cannot, nor one whose run's log another writer added to since).
    assert joined.count(True) >= len(runs), joined
