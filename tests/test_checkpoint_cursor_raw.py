"""The checkpoint's cursor without Django's cursor wrapper (common/cursors.py ``_Direct``):
the driver's errors still arrive as Django's, a broken atomic block still refuses its
statements, query capture and execute wrappers still see every statement, and a new
connection gets a new cursor. The last tests fail loudly when Django's wrapper starts
doing per statement what ``_Direct`` does not."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import pytest
from django.db import DatabaseError, IntegrityError, connection, transaction
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.backends.utils import CursorWrapper
from django.db.transaction import TransactionManagementError
from django.db.utils import DatabaseErrorWrapper
from django.test.utils import CaptureQueriesContext

from approvals.policies import newest_version
from common.cursors import _Direct, checkpoint_cursor

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.postgres]

TABLE = "checkpoint_cursor_raw"


@pytest.fixture
def table() -> Any:
    with connection.cursor() as cursor:
        cursor.execute(f"CREATE TABLE {TABLE} (id integer PRIMARY KEY)")
    yield
    with connection.cursor() as cursor:
        cursor.execute(f"DROP TABLE {TABLE}")


# The backend's driver module (psycopg, sqlite3), missing from django-stubs.
driver: Any = connection.Database  # type: ignore[attr-defined]
# Django's private methods, read for their names only.
wrapper: Any = CursorWrapper


def direct() -> Any:
    with checkpoint_cursor(connection) as cursor:
        assert type(cursor) is _Direct, f"queries logged ({connection.queries_logged}): not the direct cursor"
        return cursor


def test_it_raises_djangos_integrity_error_from_the_drivers(table: None) -> None:
    cursor = direct()
    cursor.execute(f"INSERT INTO {TABLE} (id) VALUES (%s)", [1])
    with pytest.raises(IntegrityError) as raised:
        cursor.execute(f"INSERT INTO {TABLE} (id) VALUES (%s)", [1])
    assert isinstance(raised.value.__cause__, driver.IntegrityError), repr(raised.value.__cause__)
    # As Django's wrapper decides: a broken constraint leaves the connection usable.
    assert not connection.errors_occurred


def test_it_raises_djangos_error_from_a_fetch() -> None:
    """SQLite computes the second row at the fetch, PostgreSQL at the statement."""
    cursor = direct()
    with pytest.raises(DatabaseError) as raised:
        cursor.execute("SELECT abs(x) FROM (SELECT 1 AS x UNION ALL SELECT %s AS x) AS rows", [-(2**63)])
        cursor.fetchall()
    assert isinstance(raised.value.__cause__, driver.Error), repr(raised.value.__cause__)
    assert type(raised.value).__module__ == "django.db.utils"
    connection.errors_occurred = False


def test_it_refuses_a_statement_in_a_broken_atomic_block(table: None) -> None:
    with transaction.atomic():
        cursor = direct()
        with pytest.raises(IntegrityError), transaction.atomic(savepoint=False):
            cursor.execute(f"INSERT INTO {TABLE} (id) VALUES (%s), (%s)", [1, 1])
        assert connection.needs_rollback
        with pytest.raises(TransactionManagementError):
            cursor.execute("SELECT 1")
    with checkpoint_cursor(connection) as cursor:
        cursor.execute(f"SELECT count(*) FROM {TABLE}")
        assert cursor.fetchone() == (0,)


def test_it_lets_query_capture_see_the_hot_paths_statements() -> None:
    with CaptureQueriesContext(connection) as captured:
        assert newest_version(1) is None
    assert len(captured.captured_queries) == 1
    assert "policyversion" in captured.captured_queries[0]["sql"].lower(), captured.captured_queries
    direct()


def test_it_lets_an_execute_wrapper_see_each_statement() -> None:
    seen: list[str] = []

    def wrapper(execute: Callable[..., Any], sql: str, params: Any, many: bool, context: dict[str, Any]) -> Any:
        seen.append(sql)
        return execute(sql, params, many, context)

    cursor = direct()
    # Installed after the cursor was handed out, as it is kept across blocks.
    with connection.execute_wrapper(wrapper):
        assert newest_version(1) is None
        cursor.execute("SELECT %s", [2])
        assert cursor.fetchone() == (2,)
    assert len(seen) == 2
    assert "policyversion" in seen[0].lower()
    cursor.execute("SELECT %s", [3])
    assert len(seen) == 2


def test_it_makes_a_new_cursor_for_a_new_connection() -> None:
    first = direct()
    connection.close()
    second = direct()
    assert second is not first
    second.execute("SELECT %s", [1])
    assert second.fetchone() == (1,)


# -- what _Direct relies on of Django: these fail when an upgrade changes it ---------


def names(function: Callable[..., Any]) -> set[str]:
    return set(function.__code__.co_names)


def test_it_does_what_djangos_wrapper_does_per_statement() -> None:
    """_Direct.execute copies CursorWrapper._execute but for the apps' warning."""
    assert names(wrapper._execute) == {
        "apps",
        "ready",
        "stored_app_configs",
        "warnings",
        "warn",
        "APPS_NOT_READY_WARNING_MSG",
        "RuntimeWarning",
        "db",
        "validate_no_broken_transaction",
        "wrap_database_errors",
        "cursor",
        "execute",
    }, "Django's CursorWrapper._execute changed: see common/cursors.py _Direct"
    assert names(wrapper._execute_with_wrappers) == {"db", "reversed", "execute_wrappers", "functools", "partial"}
    assert {"fetchone", "fetchall"} <= CursorWrapper.WRAP_ERROR_ATTRS
    assert names(BaseDatabaseWrapper.validate_no_broken_transaction) == {"needs_rollback", "TransactionManagementError", "rollback_exc"}


def test_it_reuses_the_connections_error_wrapper() -> None:
    assert isinstance(connection.wrap_database_errors, DatabaseErrorWrapper)
    assert connection.wrap_database_errors is connection.wrap_database_errors, "no longer cached: _Direct would keep a stale one"
    assert list(inspect.signature(DatabaseErrorWrapper.__exit__).parameters) == ["self", "exc_type", "exc_value", "traceback"]
