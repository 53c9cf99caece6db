"""Webhook notifications (issue 7): an approval requested, an approval expired and a
run stopped reach a receiver on 127.0.0.1, signed, retried with backoff after a
server error, in JSON or Slack format, every attempt recorded."""

from __future__ import annotations

import hashlib
import hmac
import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.utils import timezone

from approvals.models import ApprovalRequest
from core import events as ev
from core.scenarios import FIXED, call
from notifications import messages
from notifications.models import Delivery, WebhookEndpoint
from runs.approval_flow.flow import expire_due
from runs.approval_flow.gate import DjangoApprovals
from runs.models import Event, Run
from runs.services import drive_run
from tests.event_examples import example
from tests.fixtures_services import Worker, purge_queue
from tests.helpers import SCRIPT, World

NO_PUBLISH = [
    call("read_file", path="src/calc.py"),
    call("write_file", path="src/calc.py", content=FIXED),
    call("run_check", check_id="tests"),
    call("finish", summary="fixed"),
]


@dataclass
class Received:
    headers: dict[str, str]
    body: bytes
    at: float


@dataclass
class Receiver:
    """An HTTP server on 127.0.0.1 answering each POST with the next planned status."""

    statuses: list[int] = field(default_factory=list)
    requests: list[Received] = field(default_factory=list)
    url: str = ""

    def wait_for(self, count: int, timeout: float = 30) -> list[Received]:
        deadline = time.monotonic() + timeout
        while len(self.requests) < count:
            assert time.monotonic() < deadline, f"{len(self.requests)} requests after {timeout}s, wanted {count}"
            time.sleep(0.05)
        return self.requests


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    state = Receiver()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            state.requests.append(Received(dict(self.headers.items()), body, time.monotonic()))
            status = state.statuses.pop(0) if state.statuses else 200
            reply = f"answer {status}".encode()
            self.send_response(status)
            self.send_header("Content-Length", str(len(reply)))
            self.end_headers()
            self.wfile.write(reply)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    state.url = f"http://127.0.0.1:{server.server_address[1]}/hook"
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    thread.start()
    yield state
    server.shutdown()
    server.server_close()


@pytest.fixture
def worker(transactional_db: None, tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Iterator[Worker]:
    """A real worker (beat embedded) with quick retries and a quick sweep."""
    monkeypatch.setenv("HARNESS_WEBHOOK_RETRY_BASE_SECONDS", "0.5")
    monkeypatch.setenv("HARNESS_BEAT_NOTIFY_SECONDS", "1")
    # The receiver listens on loopback, which webhooks may reach only when allowed.
    monkeypatch.setenv("HARNESS_WEBHOOK_ALLOWED_HOSTS", "127.0.0.1")
    purge_queue()
    process = Worker(tmp_path_factory.mktemp("webhook-worker"))
    process.start()
    try:
        yield process
    finally:
        process.stop()
        purge_queue()


def endpoint(url: str, *kinds: str, fmt: str = "json", active: bool = True) -> WebhookEndpoint:
    return WebhookEndpoint.objects.create(name=f"{fmt} {kinds}", url=url, event_kinds=list(kinds), format=fmt, active=active)


def waiting_run(operator: User) -> tuple[World, Run]:
    world = World()
    run = world.create(actor=operator)
    drive_run(run, world.environment(), DjangoApprovals(run))
    return world, run


def wait_for_delivery(delivery_filter: dict[str, Any], status: str, worker: Worker, timeout: float = 30) -> Delivery:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        delivery = Delivery.objects.filter(**delivery_filter).first()
        if delivery is not None and delivery.status == status:
            return delivery
        time.sleep(0.1)
    raise AssertionError(f"no {status} delivery for {delivery_filter}: {list(Delivery.objects.values())}\n{worker.log()[-3000:]}")


def expected_signature(secret: str, request: Received) -> str:
    signed = request.headers["X-Harness-Timestamp"].encode() + b"." + request.body
    return "sha256=" + hmac.new(secret.encode(), signed, hashlib.sha256).hexdigest()


@pytest.mark.celery
def test_it_posts_a_signed_notice_when_an_approval_is_requested(worker: Worker, receiver: Receiver, operator: User) -> None:
    hook = endpoint(receiver.url, "approval_requested")
    _, run = waiting_run(operator)
    (request,) = receiver.wait_for(1)
    assert request.headers["X-Harness-Signature"] == expected_signature(hook.secret, request)
    assert request.headers["X-Harness-Signature"] != expected_signature("another secret", request)
    assert abs(int(request.headers["X-Harness-Timestamp"]) - time.time()) < 60
    assert request.headers["Content-Type"] == "application/json" and request.headers["X-Harness-Event"] == "approval_requested"
    body = json.loads(request.body)
    approval = ApprovalRequest.objects.get(run=run)
    assert body["kind"] == "approval_requested" and body["id"] == request.headers["X-Harness-Delivery"]
    assert body["run"]["id"] == str(run.pk) and body["run"]["task_id"] == "calc-fix"
    assert body["approval"]["id"] == str(approval.pk) and body["approval"]["tool"] == "publish"
    assert body["approval"]["rule"] == approval.rule and body["approval"]["url"].endswith(f"/approvals/{approval.pk}/")
    assert "args" not in body["approval"] and hook.secret not in request.body.decode()
    delivery = wait_for_delivery({"endpoint": hook}, "delivered", worker)
    assert delivery.attempts == 1 and delivery.status_code == 200 and delivery.last_error == ""
    assert delivery.event.type == "approval_required" and delivery.delivered_at is not None
    assert [a.status_code for a in delivery.attempt_log.all()] == [200]


@pytest.mark.celery
@pytest.mark.postgres
def test_it_retries_after_a_500_with_backoff_and_records_every_attempt(worker: Worker, receiver: Receiver, operator: User) -> None:
    receiver.statuses = [500, 503]
    hook = endpoint(receiver.url, "approval_requested")
    waiting_run(operator)
    first, second, third = receiver.wait_for(3)
    assert first.body == second.body == third.body
    assert len({r.headers["X-Harness-Delivery"] for r in (first, second, third)}) == 1
    assert second.at - first.at >= 0.45 and third.at - second.at >= 0.95  # 0.5s, then 1s
    delivery = wait_for_delivery({"endpoint": hook}, "delivered", worker)
    assert delivery.attempts == 3
    attempts = list(delivery.attempt_log.values_list("number", "status_code", "error"))
    assert attempts == [(1, 500, ""), (2, 503, ""), (3, 200, "")]
    assert all(a.duration_ms >= 0 for a in delivery.attempt_log.all())
    assert len(receiver.requests) == 3


@pytest.mark.celery
def test_it_gives_up_at_once_on_a_refusal_that_asking_again_will_not_change(worker: Worker, receiver: Receiver, operator: User) -> None:
    receiver.statuses = [410]
    hook = endpoint(receiver.url, "approval_requested")
    waiting_run(operator)
    delivery = wait_for_delivery({"endpoint": hook}, "failed", worker)
    assert delivery.attempts == 1 and delivery.status_code == 410 and delivery.next_retry_at is None
    time.sleep(1.5)
    assert len(receiver.requests) == 1


@pytest.mark.celery
def test_it_sends_a_slack_message_when_a_run_stops(worker: Worker, receiver: Receiver, operator: User) -> None:
    hook = endpoint(receiver.url, "run_stopped", fmt="slack")
    world = World()
    run = world.create(actor=operator, script=NO_PUBLISH)
    drive_run(run, world.environment(), DjangoApprovals(run))
    run.refresh_from_db()
    assert run.outcome == "complete"
    (request,) = receiver.wait_for(1)
    body = json.loads(request.body)
    assert set(body) == {"text", "blocks"}
    assert body["text"].startswith(f"Run calc-fix ({str(run.pk)[:8]}): completed: finished with passing checks")
    assert body["blocks"][0]["type"] == "section" and body["blocks"][1]["type"] == "context"
    assert f"/runs/{run.pk}/" in body["blocks"][1]["elements"][0]["text"]
    assert request.headers["X-Harness-Signature"] == expected_signature(hook.secret, request)
    assert wait_for_delivery({"endpoint": hook}, "delivered", worker).kind == "run_stopped"


@pytest.mark.celery
def test_it_notifies_an_expiry_only_to_endpoints_that_want_it(worker: Worker, receiver: Receiver, operator: User) -> None:
    expiries = endpoint(receiver.url, "approval_expired")
    endpoint(receiver.url, "approval_expired", active=False)
    _, run = waiting_run(operator)
    ApprovalRequest.objects.filter(run=run).update(expires_at=timezone.now() - timedelta(seconds=1))
    assert expire_due() == 1
    (request,) = receiver.wait_for(1)
    body = json.loads(request.body)
    assert body["kind"] == "approval_expired" and body["approval"]["reason"] == "no decision before the deadline"
    assert wait_for_delivery({"endpoint": expiries}, "delivered", worker).event.payload["status"] == "expired"
    time.sleep(1)
    assert len(receiver.requests) == 1 and Delivery.objects.count() == 1


@pytest.mark.celery
def test_it_sends_a_delivery_whose_task_message_was_lost(worker: Worker, receiver: Receiver, operator: User) -> None:
    hook = endpoint(receiver.url, "run_stopped")
    _, run = waiting_run(operator)
    event = Event.objects.filter(run=run).first()
    assert event is not None
    lost = Delivery.objects.create(
        endpoint=hook,
        event=event,
        kind="run_stopped",
        payload={"kind": "run_stopped", "note": "recorded, never enqueued"},
        next_retry_at=timezone.now() - timedelta(minutes=5),
    )
    (request,) = receiver.wait_for(1, timeout=30)
    assert json.loads(request.body)["note"] == "recorded, never enqueued"
    assert wait_for_delivery({"pk": lost.pk}, "delivered", worker).attempts == 1


def test_it_records_nothing_for_events_nobody_subscribed_to(db: None, operator: User) -> None:
    endpoint("http://127.0.0.1:9/hook", "run_stopped")
    endpoint("http://127.0.0.1:9/hook", "approval_requested", active=False)
    world = World()
    run = world.create(actor=operator, script=SCRIPT)
    drive_run(run, world.environment(), DjangoApprovals(run))
    assert Delivery.objects.count() == 0


def test_it_shows_deliveries_and_their_attempts_in_the_admin(db: None, admin_user: User, client: Client) -> None:
    hook = endpoint("http://127.0.0.1:9/hook", "approval_requested")
    _, run = waiting_run(admin_user)
    delivery = Delivery.objects.get(endpoint=hook)
    client.force_login(admin_user)
    listing = client.get("/admin/notifications/delivery/")
    assert listing.status_code == 200 and "approval_requested" in listing.content.decode()
    page = client.get(f"/admin/notifications/delivery/{delivery.pk}/change/")
    assert page.status_code == 200 and str(run.pk) in page.content.decode()
    assert client.get("/admin/notifications/webhookendpoint/add/").status_code == 200


# Pure rules -----------------------------------------------------------------------


def test_it_signs_the_timestamp_and_the_raw_body() -> None:
    body = b'{"kind":"run_stopped"}'
    mac = hmac.new(b"s3cret", b"1700000000." + body, hashlib.sha256).hexdigest()
    assert messages.signature("s3cret", "1700000000", body) == f"sha256={mac}"
    assert messages.signature("s3cret", "1700000001", body) != messages.signature("s3cret", "1700000000", body)


def test_it_doubles_the_wait_between_attempts_up_to_a_cap() -> None:
    assert [messages.backoff_seconds(n, 10, 60) for n in range(1, 6)] == [10, 20, 40, 60, 60]


def test_it_retries_only_what_asking_again_can_fix() -> None:
    assert [messages.retryable(code) for code in (None, 500, 503, 429, 408)] == [True] * 5
    assert [messages.retryable(code) for code in (400, 401, 404, 410, 301)] == [False] * 5


def test_it_picks_the_events_that_notify() -> None:
    lapsed = example(ev.ApprovalLapsed)
    assert messages.kind_of(example(ev.ApprovalRequired)) == "approval_requested"
    assert messages.kind_of(lapsed) == "approval_expired"
    assert messages.kind_of(lapsed.model_copy(update={"status": "stale"})) is None
    assert messages.kind_of(example(ev.Stopped)) == "run_stopped"
    assert messages.kind_of(example(ev.Proposed)) is None


def test_it_escapes_slack_markup_in_messages() -> None:
    body = {
        "id": "d1",
        "kind": "run_stopped",
        "text": "Run x stopped (denied): <!channel> & co.",
        "run": {"url": "http://h/runs/1/"},
        "event": {"seq": 9},
    }
    message = messages.slack(body)
    assert message["blocks"][0]["text"]["text"] == "Run x stopped (denied): &lt;!channel&gt; &amp; co."
    assert message["text"] == "Run x stopped (denied): &lt;!channel&gt; &amp; co."
