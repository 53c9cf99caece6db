from importlib import import_module

from django.db import migrations

import ledger.models

# An entry's seq is its primary key (ledger.models.ChainSeq): on SQLite the table's
# rowid, so an entry's insert writes neither an AUTOINCREMENT counter nor a unique index
# of its seq beside the row. SQLite makes the table again for this, and its triggers go
# with the table it drops: the one linking entries on to the heads (0003) is made
# again, both ways (the first operation's reverse runs last).
_links_on = import_module("ledger.migrations.0003_entry_links_on_to_heads")


class Migration(migrations.Migration):
    dependencies = [
        ("ledger", "0003_entry_links_on_to_heads"),
    ]

    operations = [
        migrations.RunPython(migrations.RunPython.noop, _links_on.create_trigger),
        migrations.RemoveField(
            model_name="entry",
            name="id",
        ),
        migrations.AlterField(
            model_name="entry",
            name="seq",
            field=ledger.models.ChainSeq(primary_key=True, serialize=False),
        ),
        migrations.RunPython(_links_on.create_trigger, migrations.RunPython.noop),
    ]
