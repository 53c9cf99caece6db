"""A checkpoint's values go into its statements as Django's own conversion gives them
(runs.persistence.rows.db_value), where the hot path takes a shorter way: a time in
UTC on SQLite, an empty redacted text, a receipt's body masked with its event's
payload; and the settings that path reads once (common.hot_settings) follow every
change the test suite makes."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone as django_timezone
from pytest_django import Settings

from common.hot_settings import now, setting
from common.redact import MASK
from core import events as ev
from core.fences import Lease
from runs.models import Event, Receipt, Run
from runs.persistence.rows import db_value
from runs.persistence.store import DjangoStore, load_state
from tests.helpers import World

pytestmark = [pytest.mark.django_db, pytest.mark.postgres]

TIMES = [
    datetime(2026, 12, 7, 22, 41, 58, 123456, tzinfo=UTC),
    datetime(2026, 12, 7, 22, 41, 58, tzinfo=UTC),
    datetime(1999, 1, 2, 3, 4, 5, 6, tzinfo=UTC),
    datetime(2026, 12, 7, 23, 41, 58, 5, tzinfo=timezone(timedelta(hours=1))),
]


@pytest.mark.parametrize("at", TIMES)
def test_it_writes_a_time_as_django_does(at: datetime) -> None:
    for field in (Event._meta.get_field("ts"), Run._meta.get_field("updated_at")):
        assert db_value(connection, field, at) == field.get_db_prep_save(at, connection)


def test_it_refuses_an_aware_time_as_django_does_without_time_zones(settings: Settings) -> None:
    settings.USE_TZ = False
    field = Event._meta.get_field("ts")
    if connection.vendor != "sqlite":
        assert db_value(connection, field, TIMES[0]) == field.get_db_prep_save(TIMES[0], connection)
        return
    with pytest.raises(ValueError, match="USE_TZ"):
        field.get_db_prep_save(TIMES[0], connection)
    with pytest.raises(ValueError, match="USE_TZ"):
        db_value(connection, field, TIMES[0])


@pytest.mark.parametrize("text", ["", "fine", "token ghp_" + "a" * 36])
def test_it_writes_a_redacted_text_as_django_does(text: str) -> None:
    field = Receipt._meta.get_field("problem")
    assert db_value(connection, field, text) == field.get_db_prep_save(text, connection)


def test_it_reads_use_tz_again_when_it_changes(settings: Settings) -> None:
    assert now().tzinfo is UTC
    assert abs(now() - django_timezone.now()) < timedelta(seconds=5)
    settings.USE_TZ = False
    assert now().tzinfo is None
    assert setting("USE_TZ") is False
    settings.USE_TZ = True
    assert now().tzinfo is UTC


def test_it_logs_the_statements_once_debug_is_on(settings: Settings) -> None:
    assert not connection.queries_logged
    settings.DEBUG = True
    assert connection.queries_logged
    before = len(connection.queries)
    Run.objects.count()
    assert len(connection.queries) == before + 1
    settings.DEBUG = False
    assert not connection.queries_logged
    with CaptureQueriesContext(connection) as captured:
        assert connection.queries_logged
        Run.objects.count()
    assert len(captured.captured_queries) == 1


@pytest.mark.parametrize("body", [{"status": "ok", "data": {"token": "ghp_" + "a" * 36, "n": [1, 2.5, None, "é"]}}, None, ["x", 1]])
def test_it_stores_a_receipt_body_masked_as_its_event(settings: Settings, body: object) -> None:
    settings.HARNESS_SECRET_VALUES = ["hunter2-very-secret"]
    settings.HARNESS_VERIFY_FOLD = False  # a receipt of no call: the fold refuses it
    if isinstance(body, dict):
        body["said"] = "the password is hunter2-very-secret"
    run = World().create()
    Run.objects.filter(pk=run.pk).update(lease_token=1)
    receipt = ev.ReceiptRecorded(
        run_id=str(run.pk), seq=0, ts=0.0, call_id="c1", tool="read_file", attempt=1, valid=True, receipt=body, harness_revision="r"
    )
    DjangoStore(Lease(1)).checkpoint(load_state(run), [receipt])
    stored = Receipt.objects.get(run=run, call_id="c1")
    payload = Event.objects.get(run=run, type="receipt_recorded").payload
    assert stored.body == payload["receipt"]
    if body is None:
        assert Receipt.objects.filter(run=run, body__isnull=True).count() == 1
    if isinstance(body, dict):
        assert "hunter2-very-secret" not in str(stored.body) and "ghp_" + "a" * 36 not in str(stored.body)
        assert MASK in stored.body["said"] and stored.body["data"]["n"] == [1, 2.5, None, "é"]
