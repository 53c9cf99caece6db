from importlib import import_module
from typing import Any

from django.db import migrations

# On SQLite each entry inserted moves its chains' heads on to itself if it links on to
# them (its seq and prev the global head's next, its project_seq and project_prev its
# project head's), and an entry beyond a head that does not link on to it aborts its
# statement, which then inserts nothing; an entry at or below a head leaves it where it
# is, as before (ledger/migrations/0002). So the writer sends a single decision's entry
# as a plain INSERT, numbered and digested from the heads it remembers, and the
# database checks it as it moves the heads (ledger.writer, ``_write_on_known_heads``):
# the same check in the INSERT's own WHERE cost the statement a temporary table (SQLite
# stages an INSERT ... SELECT whenever the table has a trigger) and its RETURNING one
# more, some 64,000 instructions an entry (docs/performance-history.md, 2026-12-07).
# ``changes()`` inside a trigger counts its own last UPDATE; a head's seq is read only
# when its UPDATE moved nothing. PostgreSQL's statement moves the heads itself.
TRIGGER = """
CREATE TRIGGER ledger_entry_links_on_to_heads AFTER INSERT ON ledger_entry BEGIN
    UPDATE ledger_head SET seq = NEW.seq, digest = NEW.digest
        WHERE chain = 'global' AND seq = NEW.seq - 1 AND digest = NEW.prev;
    SELECT RAISE(ABORT, 'ledger: the entry does not link on to the global head')
        WHERE changes() = 0 AND coalesce((SELECT seq FROM ledger_head WHERE chain = 'global'), 0) < NEW.seq;
    UPDATE ledger_head SET seq = NEW.project_seq, digest = NEW.digest
        WHERE NEW.project_id IS NOT NULL AND chain = 'project:' || NEW.project_id
        AND seq = NEW.project_seq - 1 AND digest = NEW.project_prev;
    SELECT RAISE(ABORT, 'ledger: the entry does not link on to its project head')
        WHERE NEW.project_id IS NOT NULL AND changes() = 0
        AND coalesce((SELECT seq FROM ledger_head WHERE chain = 'project:' || NEW.project_id), 0) < NEW.project_seq;
END
"""


def create_trigger(apps: Any, schema_editor: Any) -> None:
    if schema_editor.connection.vendor == "sqlite":
        schema_editor.execute("DROP TRIGGER IF EXISTS ledger_entry_moves_heads")
        schema_editor.execute(TRIGGER)


def drop_trigger(apps: Any, schema_editor: Any) -> None:
    if schema_editor.connection.vendor == "sqlite":
        schema_editor.execute("DROP TRIGGER IF EXISTS ledger_entry_links_on_to_heads")
        schema_editor.execute(import_module("ledger.migrations.0002_entry_indexes_its_readers_need").TRIGGER)


class Migration(migrations.Migration):
    dependencies = [
        ("ledger", "0002_entry_indexes_its_readers_need"),
    ]

    operations = [migrations.RunPython(create_trigger, drop_trigger)]
