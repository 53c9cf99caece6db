"""What keeps the pages live and honest, below the browser: heartbeats on every
socket, the lists socket, a running call's output (throttled, capped, redacted,
never stored), the trace in seq order, the reader's words, the reviewer's line
for each effectful tool, the global switch at the New run form, and the page
actions that must not resubmit or mislead."""

from __future__ import annotations

import time
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse
from pytest_django import Settings

from common.times import when
from core import events as ev
from core.fences import RowLock
from core.tools import BUILTIN_TOOLS
from harness_site.asgi import application
from live.feeds import Page, contiguous_after
from live.trace import group_cards, present
from live.wording import LABELS, duration, human
from runs import eventlog
from runs.approval_flow import deny
from runs.broadcast import LISTS_GROUP, broadcast_output, coalesce
from runs.control import set_global
from runs.eventlog import append_events
from runs.live_output import LiveOutput
from runs.models import Run
from tests.fixtures_web import waiting_scene
from tests.test_live_trace import session_cookie

ORIGIN = (b"origin", b"http://127.0.0.1")


def lists_socket(cookie: bytes) -> WebsocketCommunicator:
    return WebsocketCommunicator(application, "/ws/lists/", headers=[ORIGIN, (b"cookie", cookie)])


def trace_socket(cookie: bytes, run_id: str) -> WebsocketCommunicator:
    return WebsocketCommunicator(application, f"/ws/runs/{run_id}/", headers=[ORIGIN, (b"cookie", cookie)])


async def next_of(communicator: WebsocketCommunicator, kind: str, timeout: float = 10) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        message: dict[str, Any] = await communicator.receive_json_from(timeout=max(0.1, deadline - time.monotonic()))
        if message["type"] == kind:
            return message


# -- the running call's output ----------------------------------------------------------


def test_it_publishes_a_running_calls_last_lines_throttled_capped_and_redacted(settings: Settings) -> None:
    settings.HARNESS_SECRET_VALUES = ["hunter2-very-secret"]
    sent: list[dict[str, Any]] = []
    now = [100.0]
    live = LiveOutput("run-1", "c2", publish=lambda run_id, output: sent.append(output), interval=0.3, max_lines=3, clock=lambda: now[0])
    live.write(b"one\n")
    assert [s["lines"] for s in sent] == [["one"]], "the first chunk goes out at once"
    live.write(b"two\nthree\n")
    live.write(b"four\ntoken hunter2-very-secret sk-abcdefghijklmnopqrstuvwx\n")
    assert len(sent) == 1, "chunks inside the interval wait for it to end"
    deadline = time.monotonic() + 10
    while len(sent) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(sent) == 2, "the last chunk before a quiet spell is still sent"
    assert sent[-1]["lines"] == ["three", "four", "token [redacted] [redacted]"]
    assert sent[-1]["call_id"] == "c2" and sent[-1]["total_bytes"] == 4 + 10 + len(
        b"four\ntoken hunter2-very-secret sk-abcdefghijklmnopqrstuvwx\n"
    )
    now[0] += 1
    live.write(b"five\n")  # the interval is over: at once
    live.write(b"six\n")  # held for the next interval...
    live.close()  # ...which never comes: the call ended
    time.sleep(0.6)
    assert [s["lines"][-1] for s in sent[2:]] == ["five"], "nothing is sent once the call's output is closed"


def test_it_caps_a_single_huge_line() -> None:
    sent: list[dict[str, Any]] = []
    live = LiveOutput("run-1", "c1", publish=lambda run_id, output: sent.append(output), max_chars=100)
    live.write(b"x" * 10_000)
    assert len("".join(sent[0]["lines"])) == 100


# -- sockets --------------------------------------------------------------------------------


async def opened(communicator: WebsocketCommunicator, subscribe_after: int | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
    """Connect (and subscribe to a run's trace); the ``live`` message and the first heartbeat."""
    connected, _ = await communicator.connect()
    assert connected
    if subscribe_after is not None:
        await communicator.send_json_to({"type": "subscribe", "after_seq": subscribe_after})
    live = await next_of(communicator, "live")
    return live, await next_of(communicator, "heartbeat", timeout=3)


@pytest.fixture
def quick_beats(settings: Settings) -> float:
    settings.HARNESS_LIVE_HEARTBEAT_SECONDS = 0.2
    return 0.2


@pytest.mark.django_db(transaction=True)
def test_it_sends_heartbeats_and_running_output_on_the_trace_socket(operator: User, reviewer: User, quick_beats: float) -> None:
    scene = waiting_scene(operator)
    run_id = str(scene.run.pk)
    communicator = trace_socket(session_cookie(reviewer), run_id)

    async def watch() -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
        live, beat = await opened(communicator, scene.run.last_seq)
        broadcast_output(run_id, {"call_id": "c9", "lines": ["<b>tick</b>"], "total_bytes": 12})
        output = await next_of(communicator, "output")
        await communicator.disconnect()
        return live, beat, output

    live, beat, output = async_to_sync(watch)()
    assert live["heartbeat_seconds"] == quick_beats and beat == {"type": "heartbeat"}
    assert output == {"type": "output", "call_id": "c9", "lines": ["<b>tick</b>"], "total_bytes": 12}


@pytest.mark.django_db(transaction=True)
def test_it_tells_the_list_pages_when_a_run_changes(operator: User, reviewer: User, quick_beats: float) -> None:
    scene = waiting_scene(operator)
    run_id = str(scene.run.pk)
    communicator = lists_socket(session_cookie(reviewer))

    @database_sync_to_async  # type: ignore[untyped-decorator]  # channels ships no types
    def note() -> None:
        append_events(
            run_id, [ev.ModelNote(run_id=run_id, seq=0, ts=time.time(), kind="note", detail={})], fence=RowLock("a test's writer")
        )

    async def watch() -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
        live, beat = await opened(communicator)
        await note()
        changed = await next_of(communicator, "changed")
        await communicator.disconnect()
        return live, beat, changed

    live, beat, changed = async_to_sync(watch)()
    assert live["heartbeat_seconds"] == quick_beats and beat["type"] == "heartbeat"
    assert changed == {"type": "changed"}


@pytest.mark.django_db(transaction=True)
def test_it_tells_the_list_pages_of_a_change_whose_doorbell_was_lost(
    operator: User, reviewer: User, settings: Settings, monkeypatch: pytest.MonkeyPatch, quick_beats: float
) -> None:
    settings.HARNESS_TRACE_RECHECK_SECONDS = 0.3
    scene = waiting_scene(operator)
    run_id = str(scene.run.pk)
    communicator = lists_socket(session_cookie(reviewer))

    @database_sync_to_async  # type: ignore[untyped-decorator]  # channels ships no types
    def note() -> None:
        with monkeypatch.context() as lost:
            lost.setattr(eventlog, "ring_doorbell", lambda run_id, last_seq: None)
            append_events(
                run_id, [ev.ModelNote(run_id=run_id, seq=0, ts=time.time(), kind="note", detail={})], fence=RowLock("a test's writer")
            )

    async def watch() -> dict[str, Any]:
        await opened(communicator)
        await note()
        changed = await next_of(communicator, "changed", timeout=5)
        await communicator.disconnect()
        return changed

    assert async_to_sync(watch)() == {"type": "changed"}


@pytest.mark.django_db(transaction=True)
def test_it_refuses_the_lists_socket_to_visitors_without_a_role(outsider: User) -> None:
    cookie = session_cookie(outsider)

    async def watch() -> tuple[dict[str, Any], dict[str, Any]]:
        communicator = lists_socket(cookie)
        await communicator.connect()
        error = await communicator.receive_json_from(timeout=5)
        closed = await communicator.receive_output(timeout=5)
        return error, closed

    error, closed = async_to_sync(watch)()
    assert error["type"] == "error" and "permission" in error["error"]
    assert closed == {"type": "websocket.close", "code": 4403}


# -- what the pages say ------------------------------------------------------------------


def step(seq: int, type_: str, call_id: str | None, **payload: Any) -> dict[str, Any]:
    return present(
        {
            "run_id": "00000000-0000-0000-0000-000000000001",
            "seq": seq,
            "ts": "2026-11-30T18:19:27+00:00",
            "type": type_,
            "call_id": call_id,
            "payload": payload,
        }
    )


def test_it_keeps_the_trace_in_seq_order_when_a_call_is_interrupted() -> None:
    events = [
        step(1, "proposed", "c1", number=1, proposal={"tool": "run_check", "args": {"check_id": "slow"}}),
        step(2, "call_started", "c1", attempt=1, tool="run_check", idempotency_key=None),
        step(3, "kill_requested", None, by="otto", scope="run"),
        step(4, "stopped", "c1", status="killed", message="killed by otto"),
    ]
    items = group_cards(events)
    assert [[e["seq"] for e in item["events"]] for item in items] == [[1, 2], [3], [4]]
    assert [item.get("continued") for item in items] == [False, None, True]
    assert items[2]["tool"] == "run_check"
    assert items[1]["events"][0]["view"]["summary"] == "by otto for this run"
    assert items[2]["events"][0]["view"]["label"] == "Stopped: killed"


def test_it_shows_long_string_arguments_as_text_beside_the_json() -> None:
    view = step(1, "proposed", "c1", number=1, proposal={"tool": "publish", "args": {"message": "Fix totals\n\nReject negatives", "n": 1}})[
        "view"
    ]
    assert view["text_args"] == [{"name": "message", "text": "Fix totals\n\nReject negatives"}]
    assert view["args"] == {"message": "Fix totals\n\nReject negatives", "n": 1}


def test_it_words_statuses_for_people_and_keeps_unknown_ids_readable() -> None:
    assert human("waiting_approval") == "waiting for approval"
    assert human("proposals_exhausted") == "out of proposals"
    assert human("consumed") == "granted and used"
    assert human("some_new_reason") == "some new reason"


def test_it_describes_waits_and_self_approval_in_words() -> None:
    # Every event type has its words: tests/test_event_types.py.
    ended = step(
        2,
        "wait_ended",
        "c4",
        request_id="00000000-0000-0000-0000-00000000000a",
        exit="stale",
        run="running",
        reason="the workspace moved",
        waited_seconds=185.2,
        total_waited_seconds=185.2,
    )
    assert ended["view"]["label"] == "Wait over: out of date"
    assert ended["view"]["summary"] == "after 3m 05s waiting; the run continues: the workspace moved"
    alone = step(
        3,
        "approval_decided",
        "c4",
        request_id="00000000-0000-0000-0000-00000000000a",
        decision="granted",
        by="ada",
        reason="ok",
        self_approved=True,
    )["view"]
    assert alone["label"] == "Granted by ada" and alone["tone"] == "warn" and "self-approved" in alone["summary"]


def test_it_words_the_stop_reasons_and_request_statuses_of_issues_11_and_20() -> None:
    for raw in ("approval_expired", "approval_cancelled", "sandbox_unavailable", "workspace_error", "revision_mismatch", "cancelled"):
        assert raw in LABELS, raw
    assert duration(42.7) == "42s" and duration(185) == "3m 05s" and duration(7440) == "2h 04m"


def test_it_hands_on_only_events_that_follow_the_mark_without_a_gap() -> None:
    assert contiguous_after(4, [5, 6, 7, 9, 10]) == 3
    assert contiguous_after(4, [6, 7]) == 0
    assert contiguous_after(0, []) == 0
    page = Page(5, ['{"seq": 5}', '{"seq": 6}', '{"seq": 7}'], full=False)
    assert page.last == 7
    assert page.text_after(4) == '{"type": "events", "events": [{"seq": 5},{"seq": 6},{"seq": 7}]}'
    assert page.text_after(6) == '{"type": "events", "events": [{"seq": 7}]}'


def test_it_joins_what_queued_up_per_group_into_the_latest_doorbell_and_output() -> None:
    def doorbell(seq: int) -> dict[str, Any]:
        return {"type": "run.doorbell", "last_seq": seq}

    def output(call: str, line: str) -> dict[str, Any]:
        return {"type": "run.output", "output": {"call_id": call, "lines": [line]}}

    changed = {"type": "lists.changed"}
    queued = [
        ("run.a", doorbell(3)),
        (LISTS_GROUP, changed),
        ("run.b", doorbell(7)),
        ("run.a", output("c1", "x")),
        ("run.a", doorbell(9)),  # another process rang for 4 to 8 meanwhile: 9 says they are committed too
        ("run.a", output("c2", "z")),
        ("run.a", output("c1", "y")),
        (LISTS_GROUP, changed),
        ("run.a", doorbell(5)),  # a late one changes nothing
    ]
    assert coalesce(queued) == [
        ("run.a", doorbell(9)),
        (LISTS_GROUP, changed),
        ("run.b", doorbell(7)),
        ("run.a", output("c1", "y")),
        ("run.a", output("c2", "z")),
    ]


@pytest.mark.django_db
def test_it_shows_both_clocks_on_the_approval_and_run_pages(operator: User, reviewer: User) -> None:
    scene = waiting_scene(operator)
    for client, url in (
        (signed_in(reviewer), reverse("approvals:detail", args=[scene.request.pk])),
        (signed_in(operator), reverse("runs:detail", args=[scene.run.pk])),
    ):
        page = client.get(url).content.decode()
        # Waiting for a reviewer: the waiting clock runs, the working clock stands still.
        assert 'data-field="waited"' in page and 'data-field="working"' in page, url
        assert page.count('data-clock-ticks="1"') == 1 and 'data-field="waited" data-clock-seconds' in page, url
        waited = page.split('data-field="waited"', 1)[1]
        assert waited.split(">", 1)[0].endswith('data-clock-ticks="1"'), url


def test_it_tells_the_reviewer_what_each_effectful_tool_does() -> None:
    effectful = [spec for spec in BUILTIN_TOOLS if spec.has_effect]
    assert {spec.name for spec in effectful} >= {"publish", "write_file", "apply_patch"}
    for spec in effectful:
        assert spec.reviewer_summary.strip(), spec.name


def test_it_writes_times_for_the_viewers_zone_and_never_zero_minutes_ago() -> None:
    from datetime import UTC, datetime, timedelta

    now = datetime.now(UTC)
    assert ">just now</time>" in when(now - timedelta(seconds=20), "ago")
    assert ">3 min ago</time>" in when(now - timedelta(minutes=3, seconds=5), "ago")
    full = when(datetime(2026, 11, 30, 18, 19, 27, tzinfo=UTC))
    assert 'data-when="full"' in full and ">2026-11-30 18:19:27 UTC</time>" in full and 'title="2026-11-30 18:19:27 UTC"' in full


# -- actions --------------------------------------------------------------------------------


def signed_in(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


@pytest.mark.django_db
def test_it_refuses_a_new_run_at_the_form_while_every_run_is_stopped(admin_user: User) -> None:
    set_global(admin_user, stop_all=True, admit_new=True)
    client = signed_in(admin_user)
    page = client.get(reverse("runs:new"))
    assert "Stop all runs is on." in page.content.decode()
    response = client.post(reverse("runs:new"), {"template": "demo", "contract": "", "proposer_kind": "scripted", "proposer_options": ""})
    text = response.content.decode()
    assert response.status_code == 400 and "would be killed at once" in text and "(run)" not in text
    assert not Run.objects.exists()


@pytest.mark.django_db
def test_it_names_the_switch_it_turned_and_who_turned_it(operator: User) -> None:
    client = signed_in(operator)
    assert "Never changed" in client.get(reverse("control")).content.decode()
    page = client.post(reverse("control"), {"action": "pause_admission"}, follow=True).content.decode()
    assert "New runs are paused: runs already going continue." in page
    assert f"Last changed by {operator.username}" in page and "New runs are paused.</strong>" in page


@pytest.mark.django_db(transaction=True)
def test_it_answers_a_refused_grant_with_a_page_a_reload_does_not_resubmit(operator: User, reviewer: User) -> None:
    scene = waiting_scene(operator)
    deny(scene.request, reviewer, "no")
    client = signed_in(reviewer)
    response = client.post(reverse("approvals:grant", args=[scene.request.pk]))
    assert response.status_code == 302 and response["Location"] == reverse("approvals:detail", args=[scene.request.pk])
    page = client.get(response["Location"]).content.decode()
    assert "this request is already denied" in page and f"Denied by <strong>{reviewer.username}</strong>" in page


@pytest.mark.django_db
def test_it_lands_each_role_on_its_own_page(reviewer: User, operator: User) -> None:
    assert signed_in(reviewer).get("/")["Location"] == reverse("approvals:inbox")
    assert signed_in(operator).get("/")["Location"] == reverse("runs:list")


def test_it_links_no_empty_output() -> None:
    from live.trace import EMPTY_OUTPUT_REF

    view = step(
        5,
        "receipt_recorded",
        "c2",
        tool="run_check",
        attempt=1,
        harness_revision="r",
        valid=True,
        receipt={
            "status": "ok",
            "effect": "none",
            "revision": "r",
            "data": {"output_ref": EMPTY_OUTPUT_REF},
            "artifacts": [EMPTY_OUTPUT_REF],
        },
    )["view"]
    assert view["links"] == []


@pytest.mark.django_db(transaction=True)
def test_it_shows_a_checks_output_with_line_numbers_and_what_produced_it(operator: User) -> None:
    from runs.artifacts import ArtifactStorage
    from runs.models import Evidence

    scene = waiting_scene(operator)
    evidence = Evidence.objects.filter(run=scene.run).first()
    assert evidence is not None
    evidence.output_ref = ArtifactStorage().put(b"collected 3 items\n3 passed\n", "text/plain")
    evidence.save()
    page = signed_in(operator).get(reverse("runs:artifact", args=[scene.run.pk, evidence.output_ref])).content.decode()
    assert f"Output of check {evidence.check_id}" in page and f"exit code {evidence.exit_code}" in page
    assert evidence.revision[:12] in page and 'id="L1"' in page and 'href="#end"' in page and 'id="output-filter"' in page


@pytest.mark.django_db(transaction=True)
def test_it_keeps_an_optional_comment_on_a_grant_and_reason_on_a_kill(operator: User, reviewer: User) -> None:
    from approvals.models import ApprovalRequest
    from runs.models import Event

    granted, killed = waiting_scene(operator), waiting_scene(operator)
    signed_in(reviewer).post(reverse("approvals:grant", args=[granted.request.pk]), {"comment": "  checked with the team  "})
    assert ApprovalRequest.objects.get(pk=granted.request.pk).reason == "checked with the team"
    decided = Event.objects.get(run=granted.run, type="approval_decided").as_dict()
    assert present(decided)["view"]["summary"] == "checked with the team"

    signed_in(operator).post(reverse("runs:kill", args=[killed.run.pk]), {"reason": "wrong repository"})
    event = present(Event.objects.get(run=killed.run, type="kill_requested").as_dict())
    assert event["view"]["summary"] == f"by {operator.username} for this run: wrong repository"


@pytest.mark.django_db(transaction=True)
def test_it_rounds_the_working_clock_and_the_time_budget_alike(operator: User, reviewer: User) -> None:
    from datetime import UTC, datetime

    from pages.summary import run_summary
    from runs.approval_flow import grant
    from runs.approval_gate import DjangoApprovals
    from runs.services import drive_run
    from runs.store import load_state

    scene = waiting_scene(operator)
    grant(scene.request, reviewer)
    drive_run(scene.run, scene.world.environment(), DjangoApprovals(scene.run))
    state = load_state(Run.objects.get(pk=scene.run.pk))
    # 4.6 s of work: a clock that rounds down says 4s, a budget that rounds to nearest 5s.
    finished = datetime.fromtimestamp(state.started_at + state.waited_seconds + 4.6, UTC)
    Run.objects.filter(pk=scene.run.pk).update(updated_at=finished)
    summary = run_summary(Run.objects.get(pk=scene.run.pk))
    time_budget = next(b for b in summary["budgets"] if b["name"] == "time")
    assert summary["working_seconds"] == 4.6 and time_budget["used"] == 4 and time_budget["clock"] == "working"
    page = signed_in(operator).get(reverse("runs:detail", args=[scene.run.pk])).content.decode()
    assert 'data-clock-seconds="4.6">4s</span>' in page and ">4s / 600s</span>" in page


@pytest.mark.django_db
def test_it_says_what_is_wrong_with_a_new_run_in_words_naming_each_field(admin_user: User) -> None:
    form = {"template": "", "proposer_kind": "scripted", "proposer_options": ""}
    contract = (
        '{"task_id": "bad id!", "objective": "", "acceptance_criteria": "tests", "limits": {"max_proposals": 0, "max_attempts": "3"}}'
    )
    page = signed_in(admin_user).post(reverse("runs:new"), {**form, "contract": contract}).content.decode()
    for said in (
        "task_id: must be 1 to 100 letters, digits, &#x27;.&#x27;, &#x27;_&#x27; or &#x27;-&#x27;, starting with a letter or digit",
        "objective: must not be empty",
        "acceptance_criteria: must be a list (a JSON array)",
        "workspace: required",
        "limits.max_proposals: must be at least 1",
        "limits.max_attempts: must be a whole number",
        "script: required: the scripted proposer plays a JSON list of proposals",
    ):
        assert said in page
    for raw in ("(root)", "Field required", "Input should", "String should", "contract.task_id", "char "):
        assert raw not in page, raw
    page = signed_in(admin_user).post(reverse("runs:new"), {**form, "contract": '{"task_id": '}).content.decode()
    assert "not valid JSON: expecting value at line 1, column 12" in page and "(root)" not in page


@pytest.mark.django_db
def test_it_says_which_sign_in_box_is_empty(reviewer: User) -> None:
    page = Client().post(reverse("login"), {"username": reviewer.username, "password": ""}).content.decode()
    assert "Fill in your password." in page
    page = Client().post(reverse("login"), {"username": "", "password": ""}).content.decode()
    assert "Fill in your username and password." in page


@pytest.mark.django_db
def test_it_names_the_field_of_every_problem_in_the_policy_editor(admin_user: User) -> None:
    from approvals.policies import current_policy_row
    from approvals.policy_editor import initial_data

    main, rules, checks = initial_data(current_policy_row().document)
    data = {key: "" if value is None else value for key, value in main.items()}
    data.update(approval_ttl_seconds=0, sandbox_memory="lots", note="bad")
    data["allow_self_approval"] = ""
    for prefix, rows in (("rules", rules), ("checks", checks)):
        data.update(
            {
                f"{prefix}-TOTAL_FORMS": len(rows),
                f"{prefix}-INITIAL_FORMS": 0,
                f"{prefix}-MIN_NUM_FORMS": 0,
                f"{prefix}-MAX_NUM_FORMS": 1000,
            }
        )
        for index, row in enumerate(rows):
            for name, value in row.items():
                if value is not False:
                    data[f"{prefix}-{index}-{name}"] = value
            if prefix == "rules":
                data[f"{prefix}-{index}-ORDER"] = index + 1
    data["rules-0-name"] = ""
    data["checks-0-check_id"] = "Bad ID!"
    client = signed_in(admin_user)
    response = client.post(reverse("admin:approvals_policyversion_add"), data)
    page = response.content.decode()
    assert response.status_code == 200 and 'id="policy-problems"' in page
    for said in (
        "Approval TTL (seconds): must be at least 1",
        "Sandbox memory: must be a number followed by k, m or g (for example 512m or 2g)",
        "Rule row 1, name: must not be empty",
        "Check row 1, check id: must be 1 to 64 lowercase letters",
    ):
        assert said in page, said
    for raw in ("String should", "Input should", "pattern &#x27;"):
        assert raw not in page, raw
    refused = client.post(
        f"{reverse('admin:approvals_policyversion_add')}?json=1", {"note": "", "document_text": '{"rules": ['}
    ).content.decode()
    assert "not valid JSON: expecting value at line 1, column 12" in refused
