"""The tables a checkpoint writes to (events, receipts, evidence) key their rows by
SQLite's rowid without AUTOINCREMENT (runs.models.rowid.RowId): an INSERT reads and
writes no counter in ``sqlite_sequence``, so a checkpoint's commit writes that page no
more. On PostgreSQL the key is Django's identity column, as before."""

from __future__ import annotations

import time

import pytest
from django.db import connection
from django.utils import timezone

from core import events as ev
from core.fences import RowLock
from runs.models import Event, Evidence, Receipt
from runs.persistence.eventlog import append_events
from tests.helpers import World

pytestmark = pytest.mark.django_db(transaction=True)

TABLES = ("runs_event", "runs_receipt", "runs_evidence")


def stored_rows() -> list[int]:
    """A run with two checkpoints' events, a receipt and a check's evidence: the events' keys."""
    run = World().create()
    run_id = str(run.pk)
    for reason in ("first", "second"):
        append_events(run_id, [ev.RunResumed(run_id=run_id, seq=0, ts=time.time(), reason=reason)], fence=RowLock("a test's driver"))
    Receipt.objects.create(run=run, call_id="c1", attempt=1, valid=True, body={}, harness_revision="r", event_seq=1)
    Evidence.objects.create(
        run=run,
        call_id="c1",
        check_id="tests",
        check_version="1",
        command=["true"],
        exit_code=0,
        timed_out=False,
        duration_ms=1,
        image_digest="sha256:0",
        revision="r",
        policy_version=1,
        passed=True,
        recorded_at=timezone.now(),
    )
    return list(Event.objects.filter(run=run).order_by("seq").values_list("id", flat=True))


@pytest.mark.skipif(connection.vendor != "sqlite", reason="SQLite's schema")
def test_it_writes_no_autoincrement_counter_for_a_checkpoints_tables() -> None:
    ids = stored_rows()
    assert len(ids) == 2 and ids == sorted(set(ids))
    with connection.cursor() as cursor:
        cursor.execute("SELECT name, sql FROM sqlite_master WHERE type = 'table' AND name IN (%s, %s, %s)", TABLES)
        schema = dict(cursor.fetchall())
        cursor.execute("SELECT name FROM sqlite_sequence")
        counted = {name for (name,) in cursor.fetchall()}
    assert sorted(schema) == sorted(TABLES)
    for table, sql in schema.items():
        assert '"id" integer NOT NULL PRIMARY KEY' in sql and "AUTOINCREMENT" not in sql, table
    assert counted.isdisjoint(TABLES)


@pytest.mark.postgres_only
def test_it_keeps_postgresqls_identity_keys() -> None:
    ids = stored_rows()
    assert len(ids) == 2 and ids == sorted(set(ids))
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT table_name, data_type, is_identity FROM information_schema.columns"
            " WHERE column_name = 'id' AND table_name IN (%s, %s, %s)",
            TABLES,
        )
        found = {table: (kind, identity) for table, kind, identity in cursor.fetchall()}
    assert found == {table: ("bigint", "YES") for table in TABLES}
