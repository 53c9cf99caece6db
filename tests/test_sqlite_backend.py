"""The SQLite backend of our own (common/sqlite_backend): it overrides two underscore
methods of Django's, so these tests fail loudly when Django changes them, and check
that a transaction still begins and ends as Django's did, seen from the database, the
statement log, the commit hooks and the errors."""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from django.db import DEFAULT_DB_ALIAS, OperationalError, connection, connections, transaction
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.backends.sqlite3.base import DatabaseWrapper as DjangosWrapper
from django.test.utils import CaptureQueriesContext

from common.sqlite_backend.base import DatabaseWrapper
from runs.models import Run

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(connection.vendor != "sqlite", reason="SQLite's backend"),
]


def test_it_is_the_backend_in_use_and_keeps_the_settings_transaction_mode() -> None:
    assert isinstance(connections[DEFAULT_DB_ALIAS], DatabaseWrapper)
    assert connections[DEFAULT_DB_ALIAS].settings_dict["OPTIONS"]["transaction_mode"] == "IMMEDIATE"


def test_it_overrides_methods_django_still_has_where_it_calls_them() -> None:
    # Django's set_autocommit(False, force_begin_transaction_with_broken_autocommit=True)
    # starts SQLite's transaction with the first, and commit() ends it with the second.
    for name in ("_start_transaction_under_autocommit", "_commit"):
        assert list(inspect.signature(getattr(DjangosWrapper, name)).parameters) == ["self"], name
    assert "self._start_transaction_under_autocommit()" in inspect.getsource(BaseDatabaseWrapper.set_autocommit)
    assert "self._commit()" in inspect.getsource(BaseDatabaseWrapper.commit)
    begin = inspect.getsource(DjangosWrapper._start_transaction_under_autocommit)  # type: ignore[attr-defined]
    assert 'self.cursor().execute(f"BEGIN {self.transaction_mode}")' in begin


@contextmanager
def traced() -> Iterator[list[str]]:
    """Every statement SQLite itself runs on the connection."""
    connection.ensure_connection()
    sent: list[str] = []
    connection.connection.set_trace_callback(sent.append)
    try:
        yield sent
    finally:
        connection.connection.set_trace_callback(None)


def test_it_begins_immediate_and_commits() -> None:
    assert not connection.queries_logged  # its own way, not Django's
    with traced() as sent, transaction.atomic():
        assert connection.in_atomic_block
        Run.objects.count()
    assert sent[0] == "BEGIN IMMEDIATE"
    assert sent[-1] == "COMMIT"
    assert not connection.in_atomic_block


def test_it_logs_the_begin_and_commit_as_django_did() -> None:
    with traced() as sent, CaptureQueriesContext(connection) as captured, transaction.atomic():
        Run.objects.count()
    assert [sent[0], sent[-1]] == ["BEGIN IMMEDIATE", "COMMIT"]
    assert [captured.captured_queries[0]["sql"], captured.captured_queries[-1]["sql"]] == ["BEGIN IMMEDIATE", "COMMIT"]


def test_it_shows_an_execute_wrapper_the_begin_as_before() -> None:
    seen: list[str] = []

    def wrapper(execute, sql, params, many, context):  # type: ignore[no-untyped-def]
        seen.append(sql)
        return execute(sql, params, many, context)

    with connection.execute_wrapper(wrapper), transaction.atomic():
        pass
    assert seen == ["BEGIN IMMEDIATE"]


def test_it_runs_commit_hooks_after_the_commit_and_not_after_a_rollback() -> None:
    assert not connection.queries_logged
    ran: list[str] = []
    with traced() as sent:
        with transaction.atomic():
            transaction.on_commit(lambda: ran.append(sent[-1]))
        with pytest.raises(ZeroDivisionError), transaction.atomic():
            transaction.on_commit(lambda: ran.append("rolled back"))
            raise ZeroDivisionError
    assert ran == ["COMMIT"]
    assert sent[-1] == "ROLLBACK"


def test_it_raises_djangos_database_error_for_a_failed_begin() -> None:
    assert not connection.queries_logged
    # A transaction is open: SQLite refuses a second BEGIN.
    with transaction.atomic(), pytest.raises(OperationalError, match="within a transaction"):
        connection._start_transaction_under_autocommit()  # type: ignore[attr-defined]
