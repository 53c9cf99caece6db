"""A policy change ends the waits it makes stale, at once (docs/design.md, Approvals,
Lifecycle; issue 25). Saving a version lapses every pending request asked under an
older one, with its event, in the save's own transaction, and wakes each run once that
commits, so the waiting call goes back through the gates: a new request when the call
still asks, the call itself when the new policy allows it, a stop when it denies. The
beat's sweep repairs a wake-up or a lapse that was lost. A stale request never counts
as waiting, and the open approval page and the inbox follow all of it live."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from playwright.sync_api import Browser, Page, expect

from approvals.models import ApprovalRequest
from approvals.policies import current_policy_row
from core.faults import Fault
from core.lifecycle import IllegalTransition
from core.state import RunState
from runs import invariants, runtime, tasks
from runs.approval_flow.flow import EXPIRING, do_lapse, grant
from runs.approval_flow.gate import DjangoApprovals
from runs.cli import full_report
from runs.models import Event, Run
from runs.runtime import create_run
from runs.services import drive_run
from tests.fixtures_services import Worker, purge_queue
from tests.fixtures_web import AsgiServer, screenshot, sign_in
from tests.helpers import KillFlag, World, edited_policy, new_policy_version
from tests.runs_waiting import DEMO_CONTRACT, SCRIPTED_DEMO, assert_gap_free, wait_for
from tests.test_policy_admin import ADD, inline_form

pytestmark = pytest.mark.django_db(transaction=True)

if TYPE_CHECKING:
    from django.test.client import _MonkeyPatchedWSGIResponse  # the test client's response: only django-stubs names it

LIVE = 20_000  # ms a live update may take to show up on a loaded machine


@pytest.fixture
def resumes(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The wake-ups sent, instead of to a broker nobody reads in these tests."""
    woken: list[str] = []
    monkeypatch.setattr("runs.scheduling.queue.enqueue_resume", woken.append)
    monkeypatch.setattr(tasks.resume_run, "delay", woken.append)
    return woken


@pytest.fixture
def worker_without_sweep(transactional_db: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Worker]:
    """A real worker whose beat sweeps once an hour: whatever happens within the test
    happens because the save woke the run, not because a sweep found it."""
    purge_queue()
    worker = Worker(tmp_path_factory.mktemp("worker"), env={"HARNESS_BEAT_SWEEP_SECONDS": "3600"})
    worker.start()
    try:
        yield worker
    finally:
        worker.stop()
        purge_queue()


def drive(world: World, run: Run) -> RunState:
    run.refresh_from_db()
    return drive_run(run, world.environment(), DjangoApprovals(run), controls=KillFlag(str(run.pk)))


def waiting_run(operator: User) -> tuple[World, Run, ApprovalRequest]:
    world = World()
    run = world.create(actor=operator)
    assert drive(world, run).status == "waiting_approval"
    return world, run, ApprovalRequest.objects.get(run=run, status="pending")


def save_as_admin(
    client: Client, admin_user: User, publish: str | None = None, editor: str = "json", **fields: object
) -> _MonkeyPatchedWSGIResponse:
    """An admin saves a new version in the Django admin, with the raw JSON editor or
    the row editor (the two ways the admin saves one)."""
    client.force_login(admin_user)
    if editor == "json":
        response = client.post(ADD, {"document_text": json.dumps(edited_policy(publish, **fields)), "note": "tightened"}, follow=True)
    else:
        data = inline_form(client)
        data.update({name: str(value) for name, value in fields.items()})
        if publish is not None:
            rule = next(key for key, value in data.items() if key.endswith("-tool") and value == "publish")
            data[rule.removesuffix("-tool") + "-decision"] = publish
        response = client.post(ADD, data, follow=True)
    assert response.status_code == 200 and response.redirect_chain, response.content.decode()[:2000]
    return response


def lapses(run: Run) -> list[dict[str, Any]]:
    return [e.payload for e in Event.objects.filter(run=run, type="approval_lapsed").order_by("seq")]


def exits(run: Run) -> list[str]:
    return [e.payload["exit"] for e in Event.objects.filter(run=run, type="wait_ended").order_by("seq")]


# -- a save ends the waits it makes stale ------------------------------------------------


@pytest.mark.postgres
@pytest.mark.parametrize("editor", ["json", "rows"])
def test_it_lapses_what_a_save_makes_stale_in_the_save_and_wakes_the_run(
    client: Client, admin_user: User, operator: User, resumes: list[str], editor: str
) -> None:
    world, run, request = waiting_run(operator)
    before = current_policy_row().version
    response = save_as_admin(client, admin_user, editor=editor, approval_ttl_seconds=600)
    # Stale the moment the save is: nothing read after it shows the request waiting.
    request.refresh_from_db()
    assert request.status == "stale" and request.decided_by is None
    assert request.reason == f"policy v{before + 1} replaced v{before} while the request waited"
    assert [(e["request_id"], e["status"]) for e in lapses(run)] == [(str(request.pk), "stale")]
    assert resumes == [str(run.pk)]
    assert "1 pending request(s) were asked under an older version" in response.content.decode()
    # The woken run's call goes back through the gates, which still ask: a new request.
    assert drive(world, run).status == "waiting_approval"
    assert exits(run) == ["stale"]
    again = ApprovalRequest.objects.get(run=run, status="pending")
    assert again.call_id == request.call_id and again.policy_version == before + 1
    assert_gap_free(run)


@pytest.mark.postgres
def test_it_leaves_a_grant_not_yet_used_to_its_run(
    client: Client, admin_user: User, operator: User, reviewer: User, resumes: list[str]
) -> None:
    world, run, request = waiting_run(operator)
    grant(request, reviewer)
    resumes.clear()
    save_as_admin(client, admin_user, approval_ttl_seconds=700)
    # A grant the run is already woken for is its own to use or refuse (the gates
    # decide under the new version when it resumes); the save touches pending ones only.
    request.refresh_from_db()
    assert request.status == "granted" and resumes == []
    assert drive(world, run).status == "waiting_approval"  # stale under v+1: asked again
    assert exits(run) == ["stale"]


# -- a stale request never counts as waiting ----------------------------------------------


@pytest.mark.postgres
def test_it_never_counts_a_stale_request_as_waiting(client: Client, operator: User, reviewer: User) -> None:
    _, run, request = waiting_run(operator)
    # A version saved around the service (a shell, a script): the request is still
    # pending in its row until the sweep comes, but stale for everyone who reads it.
    new_policy_version(approval_ttl_seconds=600)
    client.force_login(reviewer)
    inbox = client.get("/approvals/").content.decode()
    assert str(request.pk) not in inbox and "0 waiting" in inbox
    assert client.get("/approvals/count/").json() == {"pending": 0}
    assert "to approve" not in client.get("/runs/").content.decode()
    assert full_report(run)["approvals_pending"] == []
    page = client.get(f"/approvals/{request.pk}/").content.decode()
    assert "out of date: the policy is now" in page
    assert 'id="grant" data-enabled-by="grant-state" disabled' in page


# -- the sweep repairs what was lost -------------------------------------------------------


@pytest.mark.postgres
def test_it_lapses_in_the_sweep_what_a_save_around_the_service_left_pending(operator: User, resumes: list[str]) -> None:
    world, run, request = waiting_run(operator)
    old = request.policy_version
    new_policy_version(publish="allow")
    assert tasks.sweep_leases() == [str(run.pk)]
    request.refresh_from_db()
    assert request.status == "stale"
    repaired = Event.objects.get(run=run, type="invariant_repaired").payload
    assert repaired["invariant"] == invariants.DECIDABLE and repaired["request_id"] == str(request.pk)
    assert repaired["repair"] == f"stale: asked under policy v{old}, v{old + 1} is in force"
    tasks.sweep_leases()
    assert Event.objects.filter(run=run, type="invariant_repaired").count() == 1
    assert drive(world, run).outcome == "complete"  # allowed now: the call went on
    assert exits(run) == ["stale"]
    assert tasks.sweep_leases() == []


@pytest.mark.postgres
def test_it_sends_again_a_wake_up_that_found_the_lease_taken(
    client: Client, admin_user: User, operator: User, resumes: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    _, run, request = waiting_run(operator)
    run_id = str(run.pk)

    def drive_and_save(run_id: str, token: int, faults: Sequence[Fault]) -> str:
        # The run's last checkpoint is written and it waits; before its worker lets go
        # of the lease, an admin saves a version and the save's wake-up arrives.
        save_as_admin(client, admin_user, approval_ttl_seconds=600)
        assert runtime.advance(run_id) == "leased_elsewhere"
        return "waiting_approval"

    monkeypatch.setattr(runtime, "drive_leased", lambda run_id, token, faults: "waiting_approval")
    assert runtime.advance(run_id) == "waiting_approval"
    assert resumes == []  # still pending: nothing to wake it for
    monkeypatch.setattr(runtime, "drive_leased", drive_and_save)
    assert runtime.advance(run_id) == "waiting_approval"
    request.refresh_from_db()
    assert request.status == "stale"
    assert resumes == [run_id, run_id]  # the save's, dropped at the lease, and the one sent again


# -- the lifecycle's table of request transitions ------------------------------------------


@pytest.mark.postgres
def test_it_lapses_a_request_only_to_a_lapse_from_pending_or_granted(operator: User, reviewer: User, resumes: list[str]) -> None:
    _, run, request = waiting_run(operator)
    for not_a_lapse in ("granted", "denied", "consumed"):
        with pytest.raises(IllegalTransition, match=f"{not_a_lapse} is not a way for an approval request to lapse"):
            do_lapse(request, not_a_lapse, "no", fence=EXPIRING)
    request.refresh_from_db()
    assert request.status == "pending" and lapses(run) == []
    grant(request, reviewer)
    request.refresh_from_db()
    with pytest.raises(IllegalTransition):
        do_lapse(request, "denied", "a denial after the grant is no lapse", fence=EXPIRING)
    # From granted, a lapse is the one the table allows from granted.
    assert do_lapse(request, "stale", "the policy moved before the grant was used", fence=EXPIRING)
    request.refresh_from_db()
    assert request.status == "stale" and [e["status"] for e in lapses(run)] == ["stale"]
    assert not do_lapse(request, "cancelled", "already ended", fence=EXPIRING)


# -- with a real worker: within seconds, each way ------------------------------------------


@pytest.mark.celery
@pytest.mark.docker
@pytest.mark.parametrize(
    ("publish", "then"),
    [("ask", "asks again"), ("allow", "goes on"), ("deny", "stops denied")],
    ids=["asks-again", "goes-on", "stops-denied"],
)
def test_it_regates_a_waiting_run_within_seconds_of_a_policy_save(
    worker_without_sweep: Worker, client: Client, admin_user: User, operator: User, publish: str, then: str
) -> None:
    worker = worker_without_sweep
    run = wait_for(create_run(DEMO_CONTRACT, SCRIPTED_DEMO, operator), ("waiting_approval",), timeout=120, log=worker.log)
    first = ApprovalRequest.objects.get(run=run, status="pending")
    saved = time.monotonic()
    save_as_admin(client, admin_user, publish=publish, approval_ttl_seconds=900)
    first.refresh_from_db()
    assert first.status == "stale"
    if then == "asks again":
        deadline = time.monotonic() + 60
        while not ApprovalRequest.objects.filter(run=run, status="pending").exists():
            assert time.monotonic() < deadline, worker.log()[-4000:]
            time.sleep(0.05)
        again = ApprovalRequest.objects.get(run=run, status="pending")
        assert again.call_id == first.call_id and again.policy_version == first.policy_version + 1
        # The request is filed before the step's checkpoint (a crash between them finds
        # it again), and the run waits before and after: the checkpoint is the exit.
        while not exits(run):
            assert time.monotonic() < deadline, worker.log()[-4000:]
            time.sleep(0.05)
        run = wait_for(run, ("waiting_approval",), log=worker.log)
    else:
        run = wait_for(run, ("complete", "stopped"), timeout=60, log=worker.log)
        assert run.outcome == ("complete" if then == "goes on" else "tool_denied"), run.stop_message
    print(f"\n{then}: {time.monotonic() - saved:.2f}s from the save to the run's answer")
    assert exits(run) == ["stale"]
    published = Event.objects.filter(run=run, type="call_started", payload__tool="publish").exists()
    assert published == (then == "goes on")
    assert_gap_free(run)


@pytest.mark.celery
@pytest.mark.docker
@pytest.mark.parametrize("lost", ["the wake-up", "the lapse"])
def test_it_repairs_a_lost_wake_up_in_the_sweep(
    celery_worker: Worker, client: Client, admin_user: User, operator: User, monkeypatch: pytest.MonkeyPatch, lost: str
) -> None:
    run = wait_for(create_run(DEMO_CONTRACT, SCRIPTED_DEMO, operator), ("waiting_approval",), timeout=120, log=celery_worker.log)
    first = ApprovalRequest.objects.get(run=run, status="pending")
    if lost == "the wake-up":
        # The broker took the save's wake-up and lost it.
        monkeypatch.setattr("runs.scheduling.queue.enqueue_resume", lambda run_id: None)
        save_as_admin(client, admin_user, approval_ttl_seconds=900)
        first.refresh_from_db()
        assert first.status == "stale"
    else:
        # A version saved around the service: nothing lapsed, nobody was woken.
        new_policy_version(approval_ttl_seconds=900)
    deadline = time.monotonic() + 60
    # The new request's row is written when it is filed, before the checkpoint that
    # records the wait's end and the new wait: both are waited for.
    while not (ApprovalRequest.objects.filter(run=run, status="pending", policy_version=first.policy_version + 1).exists() and exits(run)):
        assert time.monotonic() < deadline, celery_worker.log()[-4000:]
        time.sleep(0.1)
    first.refresh_from_db()
    assert first.status == "stale" and exits(run) == ["stale"]
    repaired = list(Event.objects.filter(run=run, type="invariant_repaired").values_list("payload__invariant", flat=True))
    assert repaired == ([] if lost == "the wake-up" else [invariants.DECIDABLE])
    assert_gap_free(run)


# -- in the browser: the open approval page and the inbox follow ----------------------------


@pytest.mark.browser
@pytest.mark.celery
@pytest.mark.docker
def test_it_shows_a_policy_save_on_the_open_approval_page_and_the_inbox_at_once(
    live_server_asgi: AsgiServer,
    worker_without_sweep: Worker,
    chromium: Browser,
    browser_page: Page,
    operator: User,
    reviewer: User,
    admin_user: User,
) -> None:
    worker = worker_without_sweep
    run = wait_for(create_run(DEMO_CONTRACT, SCRIPTED_DEMO, operator), ("waiting_approval",), timeout=120, log=worker.log)
    first = ApprovalRequest.objects.get(run=run, status="pending")
    page = browser_page
    sign_in(page, live_server_asgi, reviewer.username)
    page.goto(f"{live_server_asgi.url}/approvals/{first.pk}/")
    page.evaluate("window.__noReload = true")
    expect(page.locator("#conn")).to_have_text("live", timeout=LIVE)
    expect(page.locator("#grant")).to_be_enabled()
    expect(page.locator("#revision-panel")).to_contain_text("still current")
    inbox = page.context.new_page()
    inbox.goto(f"{live_server_asgi.url}/approvals/")
    inbox.evaluate("window.__noReload = true")
    expect(inbox.locator("#lists-conn")).to_have_text("live", timeout=LIVE)
    expect(inbox.locator(f'#inbox-rows tr[data-request="{first.pk}"]')).to_have_count(1)

    # An admin, in a browser of their own, saves a version with a shorter approval TTL.
    admin = chromium.new_context(viewport={"width": 1280, "height": 860})
    try:
        editor = admin.new_page()
        sign_in(editor, live_server_asgi, admin_user.username)
        editor.goto(f"{live_server_asgi.url}{ADD}")
        editor.fill("#id_approval_ttl_seconds", "900")
        editor.click("input[name=_save]")
        expect(editor.locator(".messagelist")).to_contain_text("out of date now")
    finally:
        admin.close()

    # Within seconds, without a reload: the page says so and closes its buttons ...
    expect(page.locator("#request-status")).to_have_text("out of date", timeout=LIVE)
    expect(page.locator("#grant")).to_be_disabled()
    expect(page.locator("#deny")).to_be_disabled()
    expect(page.locator("#revision-panel")).to_contain_text(f"out of date: policy v{first.policy_version + 1} replaced")
    expect(page.locator("#revision-panel")).not_to_contain_text("still current")
    # ... the inbox drops it, and the run asks again, which both pages show.
    expect(inbox.locator(f'#inbox-rows tr[data-request="{first.pk}"]')).to_have_count(0, timeout=LIVE)
    expect(page.locator("#asked-again")).to_contain_text(f"under policy v{first.policy_version + 1}", timeout=LIVE)
    again = ApprovalRequest.objects.get(run=run, status="pending")
    expect(inbox.locator(f'#inbox-rows tr[data-request="{again.pk}"]')).to_have_count(1, timeout=LIVE)
    expect(inbox.locator("#inbox-count")).to_have_text("1 waiting")
    assert page.evaluate("window.__noReload === true") and inbox.evaluate("window.__noReload === true")
    screenshot(page, "approval_stale_live")
    page.locator("#asked-again a").click()
    expect(page).to_have_url(f"{live_server_asgi.url}/approvals/{again.pk}/")
    expect(page.locator("#grant")).to_be_enabled()
    expect(page.locator("#revision-panel")).to_contain_text("still current")
