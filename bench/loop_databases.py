"""The databases of bench/loop_overhead.py: fresh ones for each run (SQLite files,
PostgreSQL databases created and dropped), the peer's checkpointer on them, and what
is counted there: the statements each side sends and the bytes SQLite's WAL grows by."""

from __future__ import annotations

import os
import shutil
import sqlite3
import sys
import tempfile
import uuid
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any

PG_ADMIN_URL = os.environ.get("BENCH_PG_URL", "postgres://postgres@127.0.0.1:5432/postgres")


# -- counting statements ---------------------------------------------------------


class Counter:
    def __init__(self) -> None:
        self.statements = 0

    def sqlite(self, connection: sqlite3.Connection) -> None:
        """Every statement SQLite runs on this connection, BEGIN and COMMIT included."""
        connection.set_trace_callback(lambda _sql: self._add(1))

    def _add(self, n: int) -> None:
        self.statements += n


@contextmanager
def counting_django(counter: Counter) -> Iterator[None]:
    """Statements the harness sends through Django. On SQLite the raw connection's
    trace sees everything; on PostgreSQL psycopg sends BEGIN itself and COMMIT is a
    connection call, so each commit adds those two."""
    from django.db import connection

    connection.ensure_connection()
    if connection.vendor == "sqlite":
        counter.sqlite(connection.connection)
        try:
            yield
        finally:
            connection.connection.set_trace_callback(None)
        return

    def wrapper(execute: Callable[..., Any], sql: str, params: Any, many: bool, context: Any) -> Any:
        counter._add(len(params) if many else 1)
        return execute(sql, params, many, context)

    commit = connection.commit

    def counted_commit() -> None:
        counter._add(2)
        commit()

    connection.commit = counted_commit  # type: ignore[method-assign]  # this connection's only, put back below
    try:
        with connection.execute_wrapper(wrapper):
            yield
    finally:
        del connection.commit


def counting_psycopg(conn: Any, counter: Counter) -> None:
    """Statements LangGraph's PostgresSaver sends (autocommit: no BEGIN or COMMIT)."""
    import psycopg

    class CountingCursor(psycopg.Cursor):
        def execute(self, query: Any, params: Any = None, **kwargs: Any) -> Any:
            counter._add(1)
            return super().execute(query, params, **kwargs)

        def executemany(self, query: Any, params_seq: Any, **kwargs: Any) -> Any:
            params_seq = list(params_seq)
            counter._add(len(params_seq))
            return super().executemany(query, params_seq, **kwargs)

    conn.cursor_factory = CountingCursor


def harness_wal() -> str:
    from django.db import connection

    return str(connection.settings_dict["NAME"]) if connection.vendor == "sqlite" else ""


@contextmanager
def wal_bytes(kind: str, path: str, saver: Any = None) -> Iterator[list[int]]:
    """Bytes SQLite appended to the database's write-ahead log meanwhile (whole pages
    and their frame headers: what each commit writes); nothing on PostgreSQL, whose
    WAL is shared with whatever else the server is running."""
    written: list[int] = []
    if kind != "sqlite" or not path:
        yield written
        return

    def pragma(sql: str) -> None:
        if saver is not None:
            saver.conn.execute(sql)
        else:
            from django.db import connection

            with connection.cursor() as cursor:
                cursor.execute(sql)

    # Emptied first, and not checkpointed meanwhile (a checkpoint would start the log
    # over and hide what was written): its growth is every frame written.
    wal = Path(path + "-wal")
    pragma("PRAGMA wal_checkpoint(TRUNCATE)")
    pragma("PRAGMA wal_autocheckpoint=0")
    before = wal.stat().st_size if wal.exists() else 0
    try:
        yield written
        written.append(wal.stat().st_size - before)
    finally:
        pragma("PRAGMA wal_autocheckpoint=1000")


@contextmanager
def peer_saver(kind: str, url: str) -> Iterator[tuple[Any, Callable[[Counter], AbstractContextManager[None]]]]:
    """The peer's checkpointer on a fresh database, and how to count its statements."""
    if kind == "sqlite":
        from langgraph.checkpoint.sqlite import SqliteSaver

        conn = sqlite3.connect(url, check_same_thread=False)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")
        saver = SqliteSaver(conn)
        saver.setup()

        @contextmanager
        def counting(counter: Counter) -> Iterator[None]:
            counter.sqlite(conn)
            try:
                yield
            finally:
                conn.set_trace_callback(None)

        try:
            yield saver, counting
        finally:
            conn.close()
        return
    import psycopg
    from langgraph.checkpoint.postgres import PostgresSaver
    from psycopg.rows import dict_row

    with psycopg.connect(url, autocommit=True, prepare_threshold=0, row_factory=dict_row) as pg_conn:
        pg_saver = PostgresSaver(pg_conn)
        pg_saver.setup()

        @contextmanager
        def counting_pg(counter: Counter) -> Iterator[None]:
            plain = pg_conn.cursor_factory
            counting_psycopg(pg_conn, counter)
            try:
                yield
            finally:
                pg_conn.cursor_factory = plain

        yield pg_saver, counting_pg


@contextmanager
def sqlite_databases() -> Iterator[tuple[str, str]]:
    folder = Path(tempfile.mkdtemp(prefix="bench-loop-"))
    try:
        yield f"sqlite:///{folder / 'harness.sqlite3'}", str(folder / "langgraph.sqlite3")
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@contextmanager
def postgres_databases() -> Iterator[tuple[str, str] | None]:
    """Two databases with names unique to this run, dropped afterwards."""
    import psycopg

    names = [f"bench_{uuid.uuid4().hex[:12]}_{role}" for role in ("harness", "langgraph")]
    base = PG_ADMIN_URL.rsplit("/", 1)[0]
    try:
        with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:
            for name in names:
                conn.execute(f'CREATE DATABASE "{name}"')
    except psycopg.Error as exc:
        print(f"PostgreSQL unavailable ({exc}); skipping that row", file=sys.stderr)
        yield None
        return
    try:
        yield f"{base}/{names[0]}", f"{base}/{names[1]}"
    finally:
        with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:
            for name in names:
                conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
