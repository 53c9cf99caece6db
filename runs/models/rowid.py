from typing import Any

from django.db import models


class RowId(models.BigAutoField):
    """A row's key, as Django's BigAutoField but for SQLite's AUTOINCREMENT. A table a
    checkpoint writes to (events, receipts, evidence) without it takes its next key
    from its own last row, where AUTOINCREMENT reads and writes the table's counter in
    ``sqlite_sequence`` on every INSERT: about 16,000 instructions and one more page
    in each checkpoint's commit (4 KB of WAL), docs/performance-history.md, 2026-12-07.
    What AUTOINCREMENT adds, that a key freed by deleting the table's newest rows is
    never given again, nothing here needs: no key of these rows is kept outside the
    database, and the one reference to them (a notification's delivery of an event)
    is deleted with its event. Elsewhere (PostgreSQL's identity) unchanged."""

    def db_type_suffix(self, connection: Any) -> str | None:
        if connection.vendor == "sqlite":
            return None
        # Missing from django-stubs; Django's schema editor appends what it returns to the
        # key's column (tests/test_checkpoint_rowid.py fails if it no longer does).
        return super().db_type_suffix(connection)  # type: ignore[misc,no-any-return]
