"""Event types: one name per type (the stored name is the class's ``type``), a
stored record read back as its typed event, every reader deciding about every
type, and the migration that renamed the six types stored under another name."""

from __future__ import annotations

import json
import re
from importlib import import_module
from pathlib import Path
from typing import get_args

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.utils import timezone
from pydantic import ValidationError

from core import events as ev
from core.call_record import CallRecord
from core.errors import FieldProblem
from core.fences import RowLock
from live.trace import present
from notifications import messages
from runs.persistence.eventlog import append_events
from tests.event_examples import EXAMPLES, RUN, TS, record
from tests.helpers import World

CLASSES = get_args(ev.AnyEvent)


def snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def test_it_names_every_event_type_once_after_its_class() -> None:
    assert set(CLASSES) == set(ev.Event.__subclasses__())
    names = [ev.type_name(cls) for cls in CLASSES]
    assert names == [snake(cls.__name__) for cls in CLASSES]
    assert len(set(names)) == len(names)


def test_it_has_an_example_of_every_event_type() -> None:
    assert set(EXAMPLES) == set(CLASSES)


def test_it_reads_a_stored_record_back_as_the_event_written() -> None:
    for cls, event in EXAMPLES.items():
        typed = ev.parse_event(record(event))
        assert type(typed) is cls and typed == event, cls


def test_it_gives_as_payload_the_dump_without_the_envelope() -> None:
    # The payload takes the values of an event whose fields hold no model as they are;
    # it is what the dump gives, to the byte as JSON.
    for cls, event in EXAMPLES.items():
        dumped = event.model_dump(exclude={"run_id", "seq", "ts", "call_id", "type"})
        assert event.payload() == dumped and json.dumps(event.payload()) == json.dumps(dumped), cls


def test_it_stores_a_call_record_and_problems_as_the_logs_already_hold_them() -> None:
    # Typed in the event, the JSON a log holds is what it held when they were dicts: the
    # record's JSON dump, each problem's field and message, in the same order.
    call = CallRecord(call_id="c1", tool="publish", args={"message": "fix"}, state="validated", idempotency_key="k" * 32)
    denied = ev.Denied(run_id=RUN, seq=1, ts=TS, call_id="c1", tool="publish", rule="asks", reason="no", call=call)
    held = {"tool": "publish", "rule": "asks", "reason": "no", "policy_version": None, "call": call.model_dump(mode="json")}
    assert json.dumps(denied.payload()) == json.dumps(held)
    invalid = ev.InvalidInput(run_id=RUN, seq=2, ts=TS, call_id="c1", gate="validate", problems=[FieldProblem("args.path", "required")])
    assert json.dumps(invalid.payload()) == json.dumps({"gate": "validate", "problems": [{"field": "args.path", "message": "required"}]})
    # The event keeps the record as it was emitted; the ledger's goes on changing.
    call.state = "failed"
    assert denied.call is not None and denied.call.state == "validated"
    # A record stored before the record's later fields reads back with their defaults.
    older = {"call_id": "c1", "tool": "read_file", "args": {"path": "a.py"}, "state": "failed", "attempts": 0}
    stored = record(denied)
    read = ev.parse_event({**stored, "payload": {**stored["payload"], "call": older}})
    assert isinstance(read, ev.Denied) and read.call == CallRecord(call_id="c1", tool="read_file", args={"path": "a.py"}, state="failed")


def test_it_refuses_a_record_of_an_unknown_type_or_missing_a_field() -> None:
    stopped = record(EXAMPLES[ev.Stopped])
    with pytest.raises(ValidationError, match="approval_denied"):
        ev.parse_event({**stopped, "type": "approval_denied"})
    with pytest.raises(ValidationError, match="message"):
        ev.parse_event({**stopped, "payload": {"status": "killed"}})


def test_it_describes_every_event_type_in_the_trace() -> None:
    # The fallback for a record no class reads is its raw type, muted.
    for cls, event in EXAMPLES.items():
        view = present(record(event))["view"]
        assert view["label"] != ev.type_name(cls) and view["summary"] is not None, cls
    broken = present({**record(EXAMPLES[ev.Stopped]), "payload": {}})["view"]
    assert (broken["label"], broken["tone"]) == ("stopped", "muted")


def test_it_decides_for_every_event_type_whether_it_notifies() -> None:
    kinds = {cls: messages.kind_of(event) for cls, event in EXAMPLES.items()}
    assert {cls: kind for cls, kind in kinds.items() if kind is not None} == {
        ev.ApprovalRequired: messages.APPROVAL_REQUESTED,
        ev.ApprovalLapsed: messages.APPROVAL_EXPIRED,
        ev.Stopped: messages.RUN_STOPPED,
    }


@pytest.mark.django_db(transaction=True)
@pytest.mark.postgres
def test_it_reads_stored_rows_as_their_typed_events() -> None:
    run = World().create()
    written = [event.model_copy(update={"run_id": str(run.pk)}) for event in EXAMPLES.values()]
    rows = append_events(str(run.pk), written, fence=RowLock("a test's writer"))
    stored = list(run.events.order_by("seq"))
    assert [row.type for row in stored] == [ev.type_name(type(e)) for e in written]
    for row, event in zip(stored, written, strict=True):
        # The log numbers events itself, and stores their time to the microsecond.
        assert row.typed() == event.model_copy(update={"seq": row.seq, "ts": row.ts.timestamp()})
    assert [row.seq for row in rows] == [row.seq for row in stored]


# The migration spells the names out (a migration keeps meaning what it meant);
# each new name is a class's.
OLD_NAMES: dict[str, str] = import_module("runs.migrations.0003_event_type_names").RENAMED


def test_it_renames_the_old_names_to_class_names() -> None:
    assert set(OLD_NAMES.values()) <= {ev.type_name(cls) for cls in CLASSES}
    assert not set(OLD_NAMES) & {ev.type_name(cls) for cls in CLASSES}


@pytest.mark.django_db(transaction=True)
@pytest.mark.postgres
def test_it_renames_the_rows_stored_under_the_old_names_and_back() -> None:
    run_id = World().create().pk
    before, after = [("runs", "0002_approvals_and_switch")], [("runs", "0003_event_type_names")]
    executor = MigrationExecutor(connection)
    executor.migrate(before)
    Event = executor.loader.project_state(before).apps.get_model("runs", "Event")
    kept = ["run_started", "proposed", "wait_ended"]
    for seq, type_ in enumerate([*OLD_NAMES, *kept], 1):
        Event.objects.create(run_id=run_id, seq=seq, type=type_, ts=timezone.now(), payload={})

    def stored() -> list[str]:
        return list(Event.objects.filter(run_id=run_id).order_by("seq").values_list("type", flat=True))

    MigrationExecutor(connection).migrate(after)
    assert stored() == [*OLD_NAMES.values(), *kept]
    MigrationExecutor(connection).migrate(before)
    assert stored() == [*OLD_NAMES, *kept]
    executor = MigrationExecutor(connection)
    executor.migrate(executor.loader.graph.leaf_nodes())


def test_it_documents_every_event_type_and_its_fields() -> None:
    text = (Path(__file__).parent.parent / "docs" / "live_trace.md").read_text()
    for cls in CLASSES:
        row = next((line for line in text.splitlines() if line.startswith(f"| `{ev.type_name(cls)}` | `{cls.__name__}` |")), None)
        assert row is not None, cls
        documented = set(re.findall(r"`(\w+)`", re.sub(r"\([^)]*\)", "", row.split("|")[3])))
        assert documented == set(cls.model_fields) - {"run_id", "seq", "ts", "call_id", "type"}, cls
