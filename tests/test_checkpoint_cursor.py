"""The checkpoint's cursor (common/cursors.py ``checkpoint_cursor``, used by runs/persistence/rows.py): while queries are
logged, wrapped by Django's debug wrapper, so its statements are logged like all others
(without it: tests/test_checkpoint_cursor_raw.py); on PostgreSQL
bound on the server and kept prepared, through the project's one override of a
private psycopg method (``Cursor._send_query_prepared``, which alone can record a
prepared statement for Django's log). These fail loudly when an upgrade of psycopg
or Django breaks that."""

from __future__ import annotations

import inspect

import psycopg
import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from runs.persistence.rows import checkpoint_cursor

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.postgres]

ROUNDS = 4


def test_it_logs_each_statement_it_sends() -> None:
    with CaptureQueriesContext(connection) as captured, checkpoint_cursor(connection) as cursor:
        for i in range(ROUNDS):
            cursor.execute("SELECT %s AS first", [i])
            cursor.execute("SELECT %s AS second", [str(i)])
    logged = [query["sql"] for query in captured.captured_queries]
    assert [sql.split()[-1] for sql in logged] == ["first", "second"] * ROUNDS, logged


@pytest.mark.postgres_only
def test_it_logs_a_prepared_statement_as_itself() -> None:
    first, second = "SELECT %s::integer AS first", "SELECT %s::text AS second"
    with CaptureQueriesContext(connection) as captured, checkpoint_cursor(connection) as cursor:
        for i in range(ROUNDS):
            cursor.execute(first, [i])
            cursor.execute(second, [str(i)])
    assert [query["sql"] for query in captured.captured_queries] == [
        first.replace("%s", "$1"),
        second.replace("%s", "$1"),
    ] * ROUNDS
    with connection.cursor() as cursor:
        cursor.execute("SELECT statement FROM pg_prepared_statements WHERE statement LIKE 'SELECT $1::%%'")
        prepared = sorted(statement for (statement,) in cursor.fetchall())
    # prepare_threshold is 2 (harness_site/settings.py): both shapes were prepared.
    assert prepared == [first.replace("%s", "$1"), second.replace("%s", "$1")]


def test_it_overrides_a_method_psycopg_still_has() -> None:
    method = getattr(psycopg.Cursor, "_send_query_prepared", None)
    assert method is not None, (
        f"psycopg {psycopg.__version__} has no Cursor._send_query_prepared: common/cursors.py's _ServerBindingCursor is dead"
    )
    assert list(inspect.signature(method).parameters) == ["self", "name", "pgq", "binary"], (
        f"psycopg {psycopg.__version__} changed Cursor._send_query_prepared's signature; see common/cursors.py _ServerBindingCursor"
    )
