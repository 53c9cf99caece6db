"""On PostgreSQL a checkpoint of a run that goes on is its one statement sent alone, its
own transaction (runs.persistence.eventlog, ``alone``): no BEGIN, no COMMIT, no Django
transaction around it. Against the real server: the statement still writes all of the
checkpoint or none of it (its decision's entry included), the doorbell rings only once
another connection sees the events, a stale lease is still refused, and whatever could
not be in that one statement (another writer's events between, a chain's first entry, a
listener that writes) is written in a transaction as before."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest
from django.db import connection

import runs.persistence.eventlog as eventlog
from core import events as ev
from core.fences import Lease, RowLock
from ledger.export import verify_stored
from ledger.models import Entry
from runs.models import Event, Run
from runs.persistence.eventlog import LeaseLost, append_events
from runs.persistence.signals import locks_after
from runs.persistence.store import DjangoStore, load_state
from tests.helpers import World, admitted

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.postgres_only]


def noted(run_id: str) -> ev.RunResumed:
    return ev.RunResumed(run_id=run_id, seq=0, ts=time.time(), reason="a test's note")


@pytest.fixture
def sent() -> Iterator[list[tuple[str, bool, bool]]]:
    """Each checkpoint statement sent (the ledger's and its reads left out): whether Django
    held a transaction around it, and whether the server still had one open after it
    (a BEGIN sent before it, no COMMIT yet)."""
    seen: list[tuple[str, bool, bool]] = []

    def wrapper(execute: Callable[..., Any], sql: str, params: Any, many: bool, context: Any) -> Any:
        atomic = connection.in_atomic_block
        result = execute(sql, params, many, context)
        if sql.startswith("WITH reserved AS "):
            seen.append(("WITH", atomic, connection.connection.info.transaction_status != psycopg.pq.TransactionStatus.IDLE))
        return result

    connection.ensure_connection()
    with connection.execute_wrapper(wrapper):
        yield seen


def alone(run_id: str, event: ev.Event, fence: Any = None) -> None:
    """A checkpoint of a run that goes on, as runs.persistence.store writes it."""
    append_events(run_id, [event], fence=fence or RowLock("a test's driver"), alone=True)


def decided_seqs(run_id: str) -> list[int]:
    return sorted(int(json.loads(decided)["seq"]) for decided in Entry.objects.filter(run_id=run_id).values_list("decided", flat=True))


def test_it_sends_a_step_as_one_statement_outside_any_transaction(sent: list[tuple[str, bool, bool]]) -> None:
    run_id = str(World().create().pk)
    alone(run_id, admitted(run_id, 0))  # this process's first numbering of the run: in a transaction
    del sent[:]
    alone(run_id, admitted(run_id, 1))
    alone(run_id, noted(run_id))
    assert sent == [("WITH", False, False), ("WITH", False, False)], sent
    assert connection.get_autocommit() and not connection.in_atomic_block
    assert decided_seqs(run_id) == sorted(Event.objects.filter(run_id=run_id, type="call_admitted").values_list("seq", flat=True))
    assert verify_stored() is None


def test_it_sends_a_checkpoint_inside_a_transaction_as_ever() -> None:
    run_id = str(World().create().pk)
    alone(run_id, admitted(run_id, 0))
    # A store inside a caller's transaction, and a run's end, do not pass ``alone``.
    assert not connection.in_atomic_block
    append_events(run_id, [admitted(run_id, 1)], fence=RowLock("a test's driver"))
    assert Entry.objects.filter(run_id=run_id).count() == 2


def test_it_rings_the_doorbell_once_another_connection_sees_the_events(monkeypatch: pytest.MonkeyPatch) -> None:
    run_id = str(World().create().pk)
    alone(run_id, noted(run_id))
    seen: list[tuple[int, int]] = []
    dsn = connection.get_connection_params()
    dsn.pop("cursor_factory", None)
    dsn.pop("context", None)
    with psycopg.connect(**dsn, autocommit=True) as other:

        def ring(run: str, last_seq: int) -> None:
            (count,) = other.execute("SELECT count(*) FROM runs_event WHERE run_id = %s", [run]).fetchone() or (0,)
            seen.append((last_seq, count))

        monkeypatch.setattr(eventlog, "ring_doorbell", ring)
        alone(run_id, admitted(run_id, 1))
        alone(run_id, noted(run_id))
    count = Event.objects.filter(run_id=run_id).count()
    assert seen == [(count - 1, count - 1), (count, count)], seen


def test_it_refuses_a_stale_lease_and_writes_nothing(sent: list[tuple[str, bool, bool]]) -> None:
    world = World()
    run = world.create()
    run_id = str(run.pk)
    Run.objects.filter(pk=run.pk).update(lease_token=4)
    store = DjangoStore(Lease(4))
    state = load_state(Run.objects.get(pk=run.pk))
    store.checkpoint(state, [noted(run_id)])
    Run.objects.filter(pk=run.pk).update(lease_token=5)
    before = Run.objects.get(pk=run.pk)
    entries = Entry.objects.count()
    del sent[:]
    for event in (noted(run_id), admitted(run_id, 1)):
        with pytest.raises(LeaseLost):
            state.proposals += 1
            store.checkpoint(state, [event])
    # The note's statement alone; the admission's alone, then again in a transaction
    # (the statement alone cannot tell a lost lease from a seq another writer took).
    assert sent == [("WITH", False, False), ("WITH", False, False), ("WITH", True, True)], sent
    after = Run.objects.get(pk=run.pk)
    assert (after.last_seq, after.proposals, after.state) == (before.last_seq, before.proposals, before.state)
    assert Event.objects.filter(run_id=run_id).count() == before.last_seq
    assert Entry.objects.count() == entries


def test_it_writes_in_a_transaction_what_another_writer_came_between(sent: list[tuple[str, bool, bool]]) -> None:
    run_id = str(World().create().pk)
    alone(run_id, admitted(run_id, 0))
    alone(run_id, admitted(run_id, 1))
    # Another process's events: the seqs this one would decide on ahead are taken.
    eventlog._last_seqs[run_id] -= 1
    del sent[:]
    alone(run_id, admitted(run_id, 2))
    # Alone, on the seqs it expected: nothing; then in a transaction, its entry after it.
    assert sent == [("WITH", False, False), ("WITH", True, True)], sent
    alone(run_id, admitted(run_id, 3))
    assert decided_seqs(run_id) == sorted(Event.objects.filter(run_id=run_id, type="call_admitted").values_list("seq", flat=True))
    assert verify_stored() is None


@pytest.mark.usefixtures("fresh_ledger")
def test_it_writes_a_chains_first_entry_in_a_transaction(sent: list[tuple[str, bool, bool]]) -> None:
    run_id = str(World().create().pk)
    alone(run_id, noted(run_id))
    del sent[:]
    alone(run_id, admitted(run_id, 1))
    # No heads yet: the statement alone wrote nothing; in a transaction, the events, then
    # the entry (its heads made first).
    assert sent == [("WITH", False, False), ("WITH", True, True)], sent
    assert decided_seqs(run_id) == list(Event.objects.filter(run_id=run_id, type="call_admitted").values_list("seq", flat=True))
    assert verify_stored() is None


def test_it_writes_in_a_transaction_where_a_listener_writes(monkeypatch: pytest.MonkeyPatch, sent: list[tuple[str, bool, bool]]) -> None:
    run_id = str(World().create().pk)
    alone(run_id, noted(run_id))
    monkeypatch.setattr("runs.persistence.eventlog.locks_after", [*locks_after, lambda event: isinstance(event, ev.RunResumed)])
    del sent[:]
    alone(run_id, noted(run_id))
    assert sent == [("WITH", True, True)], sent
