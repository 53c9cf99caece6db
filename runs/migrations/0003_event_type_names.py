"""One name per event type: the stored name is the class's ``type`` literal, the
snake_case of its class name (core.events; docs/live_trace.md lists them).
Six types were stored under another name; their rows are renamed here.

The old and new names are spelled out rather than read from core.events: a
migration keeps meaning what it meant when it was written."""

from django.db import migrations

RENAMED = {
    "approval_denied": "approval_refused",
    "duplicate": "duplicate_effect",
    "receipt": "receipt_recorded",
    "pending_effect": "pending_effect_recorded",
    "model": "model_note",
    "stop": "stopped",
}


def _rename(apps, mapping):
    Event = apps.get_model("runs", "Event")
    for old, new in mapping.items():
        Event.objects.filter(type=old).update(type=new)


def forwards(apps, schema_editor):
    _rename(apps, RENAMED)


def backwards(apps, schema_editor):
    _rename(apps, {new: old for old, new in RENAMED.items()})


class Migration(migrations.Migration):
    dependencies = [
        ("runs", "0002_approvals_and_switch"),
    ]

    operations = [migrations.RunPython(forwards, backwards)]
