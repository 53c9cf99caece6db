"""Django's SQLite backend, starting and committing a transaction with less Python.

Every durable step is two transactions (two checkpoints), and Django spent some 120,000
instructions on the bookkeeping of each where SQLite's own BEGIN IMMEDIATE and COMMIT
cost about 13,000: to send BEGIN it made, wrapped and checked a whole cursor (some
27,000), and it wrapped the commit in a statement-log context manager that only logs.

This module overrides two underscore methods of Django's wrapper (private API, fenced
here alone; tests/test_sqlite_backend.py fails if Django's change under it), and its
``queries_logged``, which a step asks seven times (each BEGIN, COMMIT and kept cursor),
to read ``DEBUG`` through common.hot_settings rather than as a setting each time. Whenever
anything watches the statements through Django (a query log: DEBUG, the test
framework's CaptureQueriesContext; an execute wrapper), Django's own methods run, so
the BEGIN and COMMIT it sees are the ones it always saw."""

from __future__ import annotations

from django.db.backends.sqlite3 import base

from common.hot_settings import setting


# The ignores below: django-stubs leave out both methods and transaction_mode.
class DatabaseWrapper(base.DatabaseWrapper):
    @property
    def queries_logged(self) -> bool:
        # Django's own: force_debug_cursor or settings.DEBUG.
        return bool(self.force_debug_cursor or setting("DEBUG"))

    def _start_transaction_under_autocommit(self) -> None:
        if self.queries_logged or self.execute_wrappers:
            super()._start_transaction_under_autocommit()  # type: ignore[misc]
            return
        # What Django's cursor() checked before the statement, less what set_autocommit,
        # its only caller, has just done (the health check, the connection).
        self.validate_thread_sharing()
        with self.wrap_database_errors:
            mode = self.transaction_mode  # type: ignore[attr-defined]
            self.connection.execute("BEGIN" if mode is None else f"BEGIN {mode}")

    def _commit(self) -> None:
        if self.queries_logged or self.connection is None:
            super()._commit()  # type: ignore[misc]
            return
        with self.wrap_database_errors:
            self.connection.commit()
