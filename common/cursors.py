"""The cursor for the statements of the hot path (a checkpoint's, the decision ledger's):
on PostgreSQL psycopg's own, binding on the server and keeping statements prepared;
on SQLite Django's, converting placeholders once per statement shape; reached without
Django's cursor wrapper unless queries are logged or an execute wrapper is installed.
Shared by runs/persistence/rows.py and ledger/writer.py."""

from __future__ import annotations

from threading import get_ident
from typing import TYPE_CHECKING, Any

import psycopg
from django.db.backends.sqlite3.base import SQLiteCursorWrapper

if TYPE_CHECKING:
    from psycopg._queries import PostgresQuery


def checkpoint_cursor(connection: Any) -> Any:
    """A cursor for the checkpoint's statements. On PostgreSQL it binds the values on
    the server (psycopg's own cursor) where Django's default cursor quotes every value
    into the SQL text in Python, about 100 µs of CPU per statement here, and so lets
    the server keep the statement prepared (the connection's ``prepare_threshold``).
    While queries are logged (DEBUG, CaptureQueriesContext) it is Django's debug
    wrapper, so the log holds its statements as all others; otherwise ``_Direct``,
    which calls the driver's cursor itself and raises Django's errors as Django's
    wrapper does, and hands each statement to Django's wrapper while an execute
    wrapper is installed.

    Made once per database connection and thread, and kept open (``with`` leaves it
    so): a checkpoint sends four to five statements, and making and closing Django's
    cursor for each (the health check, the connection's and thread's checks, the
    wrapper, the close) was some 30,000 instructions a statement. Its callers read
    each statement's rows before the next, so one cursor serves them all; a new one
    is made for a new connection, and when query logging is turned on or off."""
    if connection.vendor not in ("sqlite", "postgresql"):
        return connection.cursor()
    # As Django's own cursor() starts, so a failed health check still reconnects.
    connection.close_if_health_check_failed()
    held = connection.__dict__.get(_HELD)
    logged = connection.queries_logged
    if held is not None and held.raw is connection.connection and held.thread == get_ident() and held.logged == logged:
        return held
    connection.ensure_connection()
    with connection.wrap_database_errors:
        if connection.vendor == "sqlite":
            cursor = connection.connection.cursor(factory=_SQLiteCursor)
        else:
            cursor = _ServerBindingCursor(connection.connection)
    connection.validate_thread_sharing()
    wrapped = connection.make_debug_cursor(cursor) if logged else _Direct(cursor, connection)
    held = connection.__dict__[_HELD] = _Held(wrapped, connection.connection, get_ident(), logged)
    return held


_HELD = "_harness_checkpoint_cursor"


class _Held:
    """The kept cursor, as ``with checkpoint_cursor(...) as cursor`` gives it: open
    after the block."""

    __slots__ = ("cursor", "logged", "raw", "thread")

    def __init__(self, cursor: Any, raw: Any, thread: int, logged: bool) -> None:
        self.cursor, self.raw, self.thread, self.logged = cursor, raw, thread, logged

    def __enter__(self) -> Any:
        return self.cursor

    def __exit__(self, *exc: object) -> None:
        return None


class _Direct:
    """The driver's cursor with what Django's ``CursorWrapper`` does per statement that
    matters here, some 20,000 instructions a statement cheaper: its ``execute`` is a
    closure per wrapper, a context dict, two calls and a ``with`` over the error
    wrapper; its ``fetchall`` a new closure on every access. Kept: the refusal of a
    statement in a broken atomic block (``validate_no_broken_transaction``), the
    driver's errors raised as Django's through the connection's own
    ``DatabaseErrorWrapper`` (its ``__exit__``, so which errors mark the connection
    unusable stays Django's choice), and execute wrappers, for whose statements Django's
    wrapper is used. Left out: the warning of a query made while the apps load (the
    hot path runs after). tests/test_checkpoint_cursor_raw.py fails when Django's
    wrapper starts doing more per statement."""

    __slots__ = ("cursor", "db", "errors", "wrapped")

    def __init__(self, cursor: Any, db: Any) -> None:
        self.cursor, self.db, self.errors = cursor, db, db.wrap_database_errors
        self.wrapped = db.make_cursor(cursor)

    def execute(self, sql: str, params: Any = None) -> Any:
        db = self.db
        if db.execute_wrappers:
            return self.wrapped.execute(sql, params)
        if db.needs_rollback:
            db.validate_no_broken_transaction()
        # try costs nothing until it raises, where a with block makes two calls.
        try:
            return self.cursor.execute(sql, params)
        except Exception as error:
            self.errors.__exit__(type(error), error, error.__traceback__)
            raise

    def fetchone(self) -> Any:
        return self._fetched(self.cursor.fetchone)

    def fetchall(self) -> Any:
        return self._fetched(self.cursor.fetchall)

    def _fetched(self, fetch: Any) -> Any:
        try:
            return fetch()
        except Exception as error:
            self.errors.__exit__(type(error), error, error.__traceback__)
            raise

    def __getattr__(self, name: str) -> Any:
        # Anything else the hot path does not use (executemany, rowcount...): Django's.
        return getattr(self.wrapped, name)


class _SQLiteCursor(SQLiteCursorWrapper):
    """Django's SQLite cursor, turning the few statement shapes a checkpoint sends from
    ``%s`` to ``?`` placeholders once each rather than by a regular expression over the
    whole statement on every execution."""

    def convert_query(self, query: str, *, param_names: Any = None) -> str:
        # convert_query is Django's, missing from django-stubs.
        if param_names is not None:
            return str(super().convert_query(query, param_names=param_names))  # type: ignore[misc]
        found = _converted.get(query)
        if found is None:
            if len(_converted) > 256:
                _converted.clear()
            found = _converted[query] = str(super().convert_query(query))  # type: ignore[misc]
        return found


_converted: dict[str, str] = {}


class _ServerBindingCursor(psycopg.Cursor[Any]):
    """psycopg's own cursor, which binds on the server, with the one use of a private
    API in the project's database code: psycopg records the query it sent (``_query``)
    only when it is not prepared, and Django's query log (``last_executed_query``,
    and so the tests' statement counts and DEBUG's log) reads that record back, so a
    prepared statement would be logged as the last one that was not. Kept because
    binding on the server saves the client a quarter of each checkpoint
    statement's work (0.74x the instructions, 0.75x the CPU: bench/checkpoint_cursor.py,
    docs/performance.md);
    tests/test_checkpoint_cursor.py fails on a psycopg that no longer calls it."""

    def _send_query_prepared(self, name: bytes, pgq: PostgresQuery, *, binary: bool | None = None) -> None:
        self._query = pgq
        super()._send_query_prepared(name, pgq, binary=binary)
