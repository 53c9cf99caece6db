"""The dashboard in a real browser: Debian's Chromium driven by Playwright against
Daphne, with a Celery worker running the example task in the Docker sandbox.
Each scenario saves screenshots of the pages it passes to docs/screenshots/."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest
from django.contrib.auth.models import User
from django.utils import timezone
from playwright.sync_api import Locator, Page, Route, expect

from approvals.models import ApprovalRequest, PolicyVersion
from approvals.policies import current_policy_row
from core import events as ev
from core.fences import RowLock
from harness_site.celery import app as celery_app
from runs.models import Event, Run
from runs.persistence.eventlog import append_events
from runs.runtime import create_run
from tests.fixtures_services import ROOT, Worker
from tests.fixtures_web import AsgiServer, screenshot, sign_in, waiting_scene
from tests.helpers import new_policy_version

pytestmark = [pytest.mark.browser, pytest.mark.celery, pytest.mark.docker, pytest.mark.django_db(transaction=True)]

T = TypeVar("T")

DEMO = ROOT / "examples" / "demo"
LIVE = 30_000  # ms a live update may take to show up


def demo_inputs() -> tuple[dict[str, Any], dict[str, Any]]:
    contract = json.loads((DEMO / "contract.json").read_text())
    return contract, {"kind": "scripted", "script": json.loads((DEMO / "proposals.json").read_text())}


def wait_for(condition: Callable[[], T], timeout: float = 60.0, what: str = "condition") -> T:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def demo_waiting_for_approval(operator: User) -> tuple[Run, ApprovalRequest]:
    """The example task run by the worker up to its publish, which needs a reviewer."""
    contract, proposer = demo_inputs()
    run = create_run(contract, proposer, operator)
    wait_for(lambda: Run.objects.get(pk=run.pk).status == Run.Status.WAITING, what="the run to wait for approval")
    return run, ApprovalRequest.objects.get(run=run, status="pending")


def outcome(page: Page) -> Locator:
    return page.locator('[data-field="outcome"]')


def steps(page: Page) -> list[int]:
    return [int(seq) for seq in page.locator("#timeline li.step").evaluate_all("nodes => nodes.map(n => n.dataset.seq)")]


def mark_page(page: Page) -> None:
    """A flag that only survives while the page is not reloaded."""
    page.evaluate("window.__noReload = true")


def assert_not_reloaded(page: Page) -> None:
    assert page.evaluate("window.__noReload === true")


def test_it_lets_a_reviewer_read_the_diff_approve_and_watch_the_run_complete(
    live_server_asgi: AsgiServer, celery_worker: Worker, browser_page: Page, operator: User, reviewer: User
) -> None:
    page = browser_page
    run, request = demo_waiting_for_approval(operator)
    page.goto(f"{live_server_asgi.url}/accounts/login/")
    screenshot(page, "sign_in")
    sign_in(page, live_server_asgi, reviewer.username)
    screenshot(page, "runs_list")

    page.click("nav >> text=Approvals")
    expect(page.locator("#approval-badge")).to_have_text("1")
    row = page.locator("table.inbox tbody tr").first
    expect(row).to_contain_text("publish")
    expect(row.locator("time.countdown")).to_contain_text("m")
    screenshot(page, "approvals_inbox")

    row.get_by_role("link", name="Review").click()
    expect(page.locator(".diff-unified")).to_contain_text('if line["quantity"] < 0:')
    expect(page.locator(".diff-unified tr.d-add")).to_have_count(2)
    expect(page.locator("#request-args")).to_contain_text("Reject negative quantities")
    expect(page.locator(".approval-side")).to_contain_text("still current")
    expect(page.locator(".approval-side")).to_contain_text("tests passed")
    expect(page.locator(".approval-side")).to_contain_text("publishing needs a reviewer and a passing check")
    screenshot(page, "approval_detail")
    page.click("text=Side by side")
    expect(page.locator(".diff-split")).to_be_visible()
    expect(page.locator(".diff-unified")).to_be_hidden()
    screenshot(page, "approval_detail_side_by_side")

    page.click("#grant")
    page.wait_for_url(f"**/runs/{run.pk}/")
    mark_page(page)
    expect(page.locator("#conn")).to_have_text("live", timeout=LIVE)
    expect(outcome(page)).to_have_text("complete", timeout=LIVE)
    expect(page.locator("#timeline")).to_contain_text("Approval used")
    expect(page.locator("#timeline")).to_contain_text("Complete")
    expect(page.locator('[data-field="report"]')).to_be_visible()
    expect(page.locator('[data-field="evidence_current"]')).to_have_text("evidence is current")
    assert_not_reloaded(page)
    assert steps(page) == list(range(1, Run.objects.get(pk=run.pk).last_seq + 1))
    screenshot(page, "run_complete")

    with page.expect_download() as download:
        page.click('[data-field="report"]')
    report = json.loads(Path(download.value.path()).read_text())
    assert report["status"] == "complete" and report["completed"] is True

    page.locator("#timeline a", has_text="show full output").first.click()
    expect(page.locator("#output-lines")).to_contain_text("passed")
    expect(page.locator("h1")).to_have_text("Output of check tests")
    expect(page.locator(".meta-line").first).to_contain_text("exit code 0")
    page.fill("#output-filter", "passed")
    expect(page.locator("#output-lines li.hit")).not_to_have_count(0)
    expect(page.locator("#output-matches")).to_contain_text("match")
    screenshot(page, "check_output")


def slow_check_policy() -> None:
    """A new policy version with a check that runs for minutes, so there is time to kill it."""
    document = dict(current_policy_row().document)
    document["checks"] = [
        *document["checks"],
        {
            "check_id": "slow",
            "command": [
                "python3",
                "-c",
                "import time\nfor i in range(600):\n    print('working on step', i, flush=True)\n    time.sleep(0.5)",
            ],
            "timeout_seconds": 600,
        },
    ]
    PolicyVersion.objects.create(version=current_policy_row().version + 1, document=document, note="slow check for the kill test")


def test_it_lets_an_operator_watch_events_live_and_kill_a_running_check(
    live_server_asgi: AsgiServer, celery_worker: Worker, browser_page: Page, operator: User
) -> None:
    page = browser_page
    slow_check_policy()
    contract, _ = demo_inputs()
    contract["verification_targets"] = ["slow"]
    script = [{"tool": "read_file", "args": {"path": "orders/total.py"}}, {"tool": "run_check", "args": {"check_id": "slow"}}]
    run = create_run(contract, {"kind": "scripted", "script": script}, operator, enqueue=False)

    sign_in(page, live_server_asgi, operator.username)
    page.goto(f"{live_server_asgi.url}/runs/{run.pk}/")
    mark_page(page)
    expect(page.locator("#conn")).to_have_text("live", timeout=LIVE)
    assert steps(page) == []
    celery_app.send_task("runs.start_run", args=[str(run.pk)])

    check = page.locator('li.card[data-call-id="c2"]')
    expect(check.locator(".card-tool")).to_have_text("run_check", timeout=LIVE)
    expect(check).to_contain_text("Started, attempt 1", timeout=LIVE)
    expect(page.locator('li.card[data-call-id="c1"]')).to_contain_text("Receipt ok")
    expect(page.locator('[data-budget="calls"] [data-part="text"]')).to_have_text("2 / 20")
    # While the check runs: its latest output, how long it has run, the time budget ticking.
    output = check.locator(".live-output pre")
    expect(output).to_contain_text("working on step", timeout=LIVE)
    first = output.text_content()
    assert first is not None
    expect(output).not_to_have_text(first, timeout=LIVE)
    shown = output.text_content()
    assert shown is not None and len(shown.splitlines()) <= 20
    expect(check.locator(".card-elapsed")).to_contain_text(re.compile(r"running for \d+s"))
    budget = page.locator('[data-budget="time"] [data-part="text"]')
    used = budget.text_content()
    assert used is not None
    expect(budget).not_to_have_text(used, timeout=5000)
    stored = [json.dumps(event.payload) for event in Event.objects.filter(run=run)]
    assert not any("working on step" in text for text in stored), "live output is never stored"
    screenshot(page, "run_live_check")
    page.set_viewport_size({"width": 390, "height": 844})
    check.locator(".live-output").scroll_into_view_if_needed()
    screenshot(page, "run_live_output_phone")
    page.set_viewport_size({"width": 1280, "height": 860})

    page.click('[data-field="kill"]')
    expect(page.locator("h1")).to_contain_text("Kill run")
    screenshot(page, "kill_confirm")
    started = time.monotonic()
    page.click("#confirm-kill")
    page.wait_for_url(f"**/runs/{run.pk}/")
    expect(outcome(page)).to_have_text("killed", timeout=LIVE)
    assert time.monotonic() - started < 300, "the check sleeps 300s; the kill must cut it short"
    expect(page.locator("#timeline")).to_contain_text("Kill requested")
    expect(page.locator("#timeline")).to_contain_text("Stopped: killed")
    expect(page.locator('[data-field="kill"]')).to_be_hidden()
    screenshot(page, "run_killed")
    run.refresh_from_db()
    assert run.status == "stopped" and run.outcome == "killed"


def test_it_stops_the_run_when_a_reviewer_denies(
    live_server_asgi: AsgiServer, celery_worker: Worker, browser_page: Page, operator: User, reviewer: User
) -> None:
    page = browser_page
    run, request = demo_waiting_for_approval(operator)
    sign_in(page, live_server_asgi, reviewer.username)
    page.goto(f"{live_server_asgi.url}/approvals/{request.pk}/")
    page.click("#deny")  # the browser refuses an empty reason before the server would
    expect(page).to_have_url(f"{live_server_asgi.url}/approvals/{request.pk}/")
    page.fill("#id_reason", "publishing is frozen until the release")
    # The run's last event (its stop) has no successor to refresh the summary, so
    # the page must retry a summary request that fails. The stop may already be in
    # the page as served (the worker is quick) or arrive live; either way the page
    # asks for the summary when its stream goes live, and asks again until it gets one.
    failed: list[str] = []
    answered: list[str] = []

    def fail_twice(route: Route) -> None:
        if len(failed) < 2:
            failed.append(route.request.url)
            route.fulfill(status=503, body="busy")
        else:
            answered.append(route.request.url)
            route.continue_()

    page.route("**/summary/", fail_twice)
    page.click("#deny")
    page.wait_for_url(f"**/runs/{run.pk}/")
    deadline = time.monotonic() + LIVE / 1000
    while not answered:
        assert time.monotonic() < deadline, f"no summary answered after {len(failed)} failed requests"
        page.wait_for_timeout(100)
    assert len(failed) == 2
    expect(outcome(page)).to_have_text("denied", timeout=LIVE)
    expect(page.locator('[data-field="said"]')).to_contain_text("publishing is frozen until the release")
    expect(page.locator("#timeline")).to_contain_text(f"Denied by {reviewer.username}")
    expect(page.locator("#timeline .step-label", has_text="Denied by")).to_have_count(1)
    screenshot(page, "run_denied")
    request.refresh_from_db()
    assert request.status == "denied" and request.decided_by == reviewer
    assert not Event.objects.filter(run=run, type="call_started", payload__tool="publish").exists()


def test_it_refuses_to_grant_a_stale_request(
    live_server_asgi: AsgiServer, celery_worker: Worker, browser_page: Page, operator: User, reviewer: User
) -> None:
    page = browser_page
    run, request = demo_waiting_for_approval(operator)
    sign_in(page, live_server_asgi, reviewer.username)
    page.goto(f"{live_server_asgi.url}/approvals/{request.pk}/")
    expect(page.locator("#grant")).to_be_enabled()

    # While the reviewer reads, an admin changes the policy: the request is stale.
    new_policy_version(approval_ttl_seconds=600)
    # The page may already have been told (the sweep lapses the request within a second)
    # and disabled Grant; the form is sent as the older page would send it, so what is
    # tested is the server's refusal, whichever came first.
    with page.expect_navigation():
        page.evaluate("document.querySelector('form.grant-form').submit()")
    expect(page.locator(".error-box")).to_contain_text("stale")
    expect(page.locator("#grant")).to_be_disabled()
    expect(page.locator("#deny")).to_be_disabled()
    expect(page.locator("#request-status")).to_have_text("out of date")
    screenshot(page, "approval_stale")
    request.refresh_from_db()
    assert request.status == "stale" and request.decided_by is None


def test_it_resumes_the_trace_without_gaps_after_the_socket_drops(
    live_server_asgi: AsgiServer, browser_page: Page, operator: User, reviewer: User
) -> None:
    page = browser_page
    scene = waiting_scene(reviewer)
    run_id = str(scene.run.pk)

    def note(n: int) -> None:
        event = ev.ModelNote(run_id=run_id, seq=0, ts=timezone.now().timestamp(), kind="note", detail={"n": n})
        append_events(run_id, [event], fence=RowLock("a test's writer"))

    sign_in(page, live_server_asgi, operator.username)
    page.goto(f"{live_server_asgi.url}/runs/{run_id}/")
    mark_page(page)
    expect(page.locator("#conn")).to_have_text("live", timeout=LIVE)
    for n in range(3):
        note(n)
    last = Run.objects.get(pk=run_id).last_seq
    expect(page.locator(f'li.step[data-seq="{last}"]')).to_be_attached(timeout=LIVE)

    live_server_asgi.stop()
    expect(page.locator("#conn")).to_have_attribute("data-state", re.compile("reconnecting|disconnected"), timeout=LIVE)
    screenshot(page, "run_reconnecting")
    for n in range(3, 13):
        note(n)  # committed while no socket is open
    live_server_asgi.start()
    expect(page.locator("#conn")).to_have_text("live", timeout=LIVE)
    for n in range(13, 16):
        note(n)
    last = Run.objects.get(pk=run_id).last_seq
    expect(page.locator(f'li.step[data-seq="{last}"]')).to_be_attached(timeout=LIVE)
    assert steps(page) == list(range(1, last + 1))
    assert_not_reloaded(page)


def test_it_shows_the_other_pages(live_server_asgi: AsgiServer, browser_page: Page, operator: User, admin_user: User) -> None:
    page = browser_page
    waiting_scene(operator)
    sign_in(page, live_server_asgi, admin_user.username)
    page.goto(f"{live_server_asgi.url}/runs/new/")
    page.select_option("#id_template", "demo")
    expect(page.locator("#id_contract")).to_have_value(re.compile("orders-negative-quantity"))
    expect(page.locator("#id_proposer_options")).to_have_value(re.compile("apply_patch"))
    screenshot(page, "new_run")
    page.fill("#id_contract", '{"task_id": "bad id!", "objective": "", "limits": {"max_proposals": 0}}')
    page.click("text=Start run")
    errors = page.locator(".error-box")
    for field in ("task_id", "objective", "acceptance_criteria", "limits.max_proposals", "workspace"):
        expect(errors).to_contain_text(field)
    screenshot(page, "new_run_errors")

    page.goto(f"{live_server_asgi.url}/control/")
    expect(page.locator("h1")).to_have_text("Global kill switch")
    screenshot(page, "kill_switch")
    page.goto(f"{live_server_asgi.url}/runs/?status=waiting_approval")
    expect(page.locator("table.runs tbody tr")).to_have_count(1)
    expect(page.locator("table.runs")).to_contain_text("1 to approve")
