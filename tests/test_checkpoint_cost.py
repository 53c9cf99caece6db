"""A durable step costs few statements: each checkpoint is one transaction with one
UPDATE of the run row (fencing, numbering and state at once), one multi-row INSERT of
its events and one statement per projection it touched, and no savepoints; on
PostgreSQL all of that is one statement (the UPDATE a common table expression of the
INSERTs), prepared once its shape recurs. Counted, not timed: the timing is in
bench/loop_overhead.py."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from django.conf import settings
from django.db import connection
from django.test.utils import CaptureQueriesContext

import runs.services as services
from core import events as ev
from core.fences import Lease, RowLock
from core.scenarios import call
from core.simulated import MemoryApprovals
from core.state import RunState
from ledger.models import Entry
from runs.models import Event, Receipt, Run
from runs.persistence.eventlog import append_event
from runs.persistence.rows import RESERVED
from runs.persistence.store import DjangoStore, LeaseLost, StateText, load_state
from runs.services import drive_run
from tests.helpers import World

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.postgres]

READS = 6


def numbered() -> list[str]:
    """The statements that number and store a checkpoint's events."""
    return ["WITH"] if connection.vendor == "postgresql" else ["UPDATE", "INSERT"]


class CountingStore(DjangoStore):
    """Records the statements each checkpoint sent."""

    def __init__(self) -> None:
        super().__init__(RowLock("a test's counting driver"))
        self.checkpoints: list[list[str]] = []
        self.ledger: list[int] = []

    def checkpoint(self, state: RunState, events: Sequence[ev.Event]) -> None:
        with CaptureQueriesContext(connection) as captured:
            super().checkpoint(state, events)
        self.checkpoints.append(statements(captured))
        self.ledger.append(ledger_statements(captured))


def statements(captured: CaptureQueriesContext) -> list[str]:
    """The kind of each statement sent, transaction boundaries left out (PostgreSQL's
    driver sends those itself, SQLite's are logged), and the decision ledger's left out
    (counted apart: ``ledger_statements``)."""
    kinds = [q["sql"].split()[0].upper() for q in captured.captured_queries if not is_ledgers(q["sql"])]
    return [kind for kind in kinds if kind not in ("BEGIN", "COMMIT", "ROLLBACK")]


def is_ledgers(sql: str) -> bool:
    """A statement of the decision ledger's writer (ledger.writer), or its one read of a
    run's project for a decision made outside the run's driver (runs.persistence.decisions);
    not the checkpoint's statement that writes its entry too (ledger.writer.joining)."""
    if sql.startswith(f"WITH {RESERVED} AS "):
        return False
    return "ledger_" in sql or (sql.upper().startswith("SELECT") and '"project_id"' in sql and "runs_run" in sql)


def ledger_statements(captured: CaptureQueriesContext) -> int:
    return sum(1 for q in captured.captured_queries if is_ledgers(q["sql"]))


def drive_reads(monkeypatch: pytest.MonkeyPatch) -> tuple[Run, CountingStore]:
    world = World()
    run = world.create(script=[call("read_file", path="src/calc.py")] * READS)
    store = CountingStore()
    monkeypatch.setattr(services, "DjangoStore", lambda fence: store)
    # What a checkpoint sends is counted; the suite's own check after each (the fold
    # of the log read back: runs.persistence.store.check_stored) is no part of it.
    monkeypatch.setattr(settings, "HARNESS_VERIFY_FOLD", False)
    drive_run(run, world.environment(), MemoryApprovals())
    return run, store


def test_it_takes_no_savepoint_and_no_extra_read_in_a_checkpoint(monkeypatch: pytest.MonkeyPatch) -> None:
    _, store = drive_reads(monkeypatch)
    # All but the last: the run's stop calls for a webhook notice, which has its own
    # savepoint so that a failing notice never costs the run its stop event.
    sent = [kind for checkpoint in store.checkpoints[:-1] for kind in checkpoint]
    assert "SAVEPOINT" not in sent and "SELECT" not in sent, sent


def projected(*tables: str) -> list[str]:
    """The statements of a checkpoint that also writes these tables' rows."""
    return ["WITH"] if connection.vendor == "postgresql" else ["UPDATE", "INSERT", *("INSERT" for _ in tables)]


@pytest.mark.usefixtures("fresh_ledger")
def test_it_stores_a_read_step_in_at_most_five_statements_and_two_on_postgresql(monkeypatch: pytest.MonkeyPatch) -> None:
    run, store = drive_reads(monkeypatch)
    # The first checkpoint records the run's start, the last its stop; in between,
    # two per read: the proposal, then its admission, start and receipt.
    steps = store.checkpoints[1:-1]
    assert len(steps) == 2 * READS
    proposal, result = steps[2], steps[3]
    assert proposal == numbered(), proposal
    assert result == projected("receipt"), result
    assert sum(len(c) for c in steps[2:]) / (READS - 1) == len(numbered()) + len(projected("receipt"))
    # The chain's first entry: on PostgreSQL the statement sent alone writes nothing where
    # the heads it chains on are missing, and is sent again in a transaction.
    assert steps[1] == (["WITH", "WITH"] if connection.vendor == "postgresql" else projected("receipt")), steps[1]
    seqs = list(Event.objects.filter(run=run).values_list("seq", flat=True))
    assert seqs == list(range(1, len(seqs) + 1))
    # The decision ledger's entry of each admission (ledger.writer): one statement (both
    # chains' heads read, locked on PostgreSQL, the entry chained and inserted, the heads
    # moved: on SQLite by the entries' trigger); on PostgreSQL none, the checkpoint's own
    # statement writes it (ledger.writer.joining). What the rule was shown is rebuilt from
    # the event, never stored apart. Nothing for a step that decided nothing. Its cost is
    # in docs/performance.md (bench/ledger_cost.py).
    ledger = store.ledger[1:-1]
    # The chain's first entry also makes its heads' rows, and so is sent twice (with,
    # on PostgreSQL, the global head locked before a project's is made).
    first, then = (5, 0) if connection.vendor == "postgresql" else (4, 1)
    assert ledger[0::2] == [0] * READS and ledger[1] == first and ledger[3::2] == [then] * (READS - 1), ledger
    assert Entry.objects.filter(run_id=run.pk, kind="gate.allowed").count() == READS


def test_it_numbers_an_event_in_the_statement_that_locks_the_run() -> None:
    world = World()
    run = world.create()
    with CaptureQueriesContext(connection) as captured:
        row = append_event(str(run.pk), ev.KillRequested, fence=RowLock("a test's kill"), by="operator", scope="run")
    assert statements(captured) == numbered(), statements(captured)
    [numbering] = [
        q["sql"].upper() for q in captured.captured_queries if q["sql"].upper().startswith(("UPDATE", "WITH")) and not is_ledgers(q["sql"])
    ]
    assert "RETURNING" in numbering.split(" INSERT ")[0], numbering
    run.refresh_from_db()
    assert row.seq == run.last_seq


def test_it_refuses_a_stale_lease_token_in_that_same_statement() -> None:
    world = World()
    run = world.create()
    Run.objects.filter(pk=run.pk).update(lease_token=5)
    state = load_state(run)
    event = ev.RunResumed(run_id=str(run.pk), seq=0, ts=0.0, reason="stale worker")
    before = Run.objects.get(pk=run.pk)
    with CaptureQueriesContext(connection) as captured, pytest.raises(LeaseLost):
        state.proposals = 99
        DjangoStore(Lease(4)).checkpoint(state, [event])
    assert statements(captured) == numbered()[:1], statements(captured)
    after = Run.objects.get(pk=run.pk)
    assert (after.last_seq, after.proposals, after.state) == (before.last_seq, before.proposals, before.state)
    assert not Event.objects.filter(run=run, type="run_resumed").exists()


def test_it_writes_no_projection_when_the_lease_token_is_stale(monkeypatch: pytest.MonkeyPatch) -> None:
    run, _ = drive_reads(monkeypatch)
    receipts = Receipt.objects.filter(run=run).count()
    Run.objects.filter(pk=run.pk).update(lease_token=5)
    receipt = ev.ReceiptRecorded(
        run_id=str(run.pk), seq=0, ts=0.0, call_id="late", tool="read_file", attempt=1, valid=True, receipt={}, harness_revision="r"
    )
    with pytest.raises(LeaseLost):
        DjangoStore(Lease(4)).checkpoint(load_state(run), [receipt])
    assert Receipt.objects.filter(run=run).count() == receipts
    assert not Receipt.objects.filter(run=run, call_id="late").exists()


@pytest.mark.postgres_only
def test_it_has_the_server_keep_the_checkpoint_statement_prepared(monkeypatch: pytest.MonkeyPatch) -> None:
    drive_reads(monkeypatch)
    with connection.cursor() as cursor:
        cursor.execute("SELECT statement FROM pg_prepared_statements WHERE statement LIKE 'WITH reserved AS (UPDATE%%'")
        prepared = [statement for (statement,) in cursor.fetchall()]
    # The proposal's shape and the result's, each seen once per read.
    assert len(prepared) >= 2, prepared


def test_it_stores_the_state_as_model_dump_json_gives_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """The checkpoint serialises the state through pydantic's ``__pydantic_serializer__``
    (runs.persistence.store.StateText): a pydantic whose serializer gave other text
    than ``model_dump_json`` fails here."""
    run, _ = drive_reads(monkeypatch)
    state = load_state(Run.objects.get(pk=run.pk))
    assert StateText()(state).text == state.model_dump_json()
