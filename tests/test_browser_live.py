"""The reviewer's and operator's day in a real browser (Debian's Chromium through
Playwright, against Daphne), at a laptop's 1366x768 and a phone's 390x844: an
honest connection indicator, lists and the approval page that follow changes
live, the layout on a phone, the keyboard path to Grant, times in the viewer's
zone, the global switch's banner and an accessibility pass with axe-core."""

from __future__ import annotations

import contextlib
import re
import time
from collections.abc import Iterator
from datetime import timedelta

import pytest
from django.contrib.auth.models import User
from django.utils import timezone
from playwright.sync_api import BrowserContext, FloatRect, Locator, Page, expect
from playwright.sync_api import TimeoutError as PlaywrightTimeoutError

from approvals.models import ApprovalRequest
from runs.approval_flow.flow import expire_due
from runs.control import kill, set_global
from tests.fixtures_web import SIZES, AsgiServer, screenshot, sign_in, waiting_scene

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

LIVE = 20_000  # ms a live update may take to show up on a loaded machine
HEARTBEAT = 1.0  # s between the server's heartbeats in these tests


@pytest.fixture
def web(transactional_db: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[AsgiServer]:
    server = AsgiServer(tmp_path_factory.mktemp("daphne"), HARNESS_LIVE_HEARTBEAT_SECONDS=str(HEARTBEAT))
    server.start()
    try:
        yield server
    finally:
        if server.proc is not None:
            server.resume()
        server.stop()


def signed_in(context: BrowserContext, web: AsgiServer, user: User, path: str) -> Page:
    """A new tab at ``path``; the first tab of a context signs in (the others share it)."""
    page = context.new_page()
    if not context.cookies():
        sign_in(page, web, user.username)
    page.goto(f"{web.url}{path}")
    page.evaluate("window.__noReload = true")
    return page


def box_of(element: Locator) -> FloatRect:
    """Where a visible element is on the page.

    A live refresh swaps its region for a fresh copy; an element found just before the swap
    is measured detached, without a box, so it is found and measured again until ``LIVE``
    has passed (only an element that stays hidden fails).
    """
    expect(element).to_be_visible(timeout=LIVE)
    deadline = time.monotonic() + LIVE / 1000
    while (box := element.bounding_box()) is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert box is not None, "the element stayed hidden"
    return box


def not_reloaded(page: Page) -> bool:
    return bool(page.evaluate("window.__noReload === true"))


def test_it_says_offline_and_when_the_server_stops_talking(web: AsgiServer, context: BrowserContext, size: str, operator: User) -> None:
    scene = waiting_scene(operator)
    page = signed_in(context, web, operator, f"/runs/{scene.run.pk}/")
    conn = page.locator("#conn")
    expect(conn).to_have_text("live", timeout=LIVE)
    expect(page.locator("#conn-retry")).to_be_hidden()

    waited = page.locator('#summary [data-field="waited"]')
    context.set_offline(True)
    expect(conn).to_have_attribute("data-state", "offline", timeout=LIVE)
    expect(conn).to_contain_text(re.compile(r"offline, no updates since \d\d:\d\d:\d\d"))
    expect(waited).to_have_attribute("data-clock-held", re.compile(r"^\d+$"))
    expect(page.locator('#summary [data-field="outcome"]')).to_have_text("last known: waiting for approval")
    context.set_offline(False)
    expect(conn).to_have_text("live", timeout=LIVE)
    expect(page.locator('#summary [data-field="outcome"]')).to_have_text("waiting for approval")
    expect(waited).not_to_have_attribute("data-clock-held", re.compile(".*"))

    web.pause()  # the server stops sending; the socket stays open
    expect(conn).to_have_attribute("data-state", "quiet", timeout=LIVE)
    expect(conn).to_contain_text(re.compile(r"^no updates since \d\d:\d\d:\d\d$"))
    expect(page.locator("#conn-retry")).to_be_visible()
    expect(waited).to_have_attribute("data-clock-held", re.compile(r"^\d+$"))
    web.resume()
    expect(conn).to_have_text("live", timeout=LIVE)
    expect(waited).not_to_have_attribute("data-clock-held", re.compile(".*"), timeout=LIVE)

    web.stop()
    expect(conn).to_have_attribute("data-state", re.compile("reconnecting|disconnected"), timeout=LIVE)
    # The countdown ticks; "Retry now" does not wait for it.
    for _ in range(3):
        page.locator("#conn-retry").click()
    expect(conn).to_contain_text(re.compile(r"in \d+s"), timeout=LIVE)
    seen = set()
    for _ in range(12):
        seen.add(conn.text_content())
        time.sleep(0.25)
    assert len(seen) >= 2, f"the countdown does not tick: {seen}"
    screenshot(page, f"run_reconnecting_{size}")
    web.start()
    # The server takes seconds to come back on a loaded machine; the countdown may
    # reconnect first, and then there is no "Retry now" left to press.
    with contextlib.suppress(PlaywrightTimeoutError):
        page.locator("#conn-retry").click(timeout=2000)
    expect(conn).to_have_text("live", timeout=LIVE)
    assert not_reloaded(page)


def test_it_holds_the_status_and_the_clocks_while_offline_and_shows_a_stop_made_meanwhile(
    web: AsgiServer, context: BrowserContext, size: str, operator: User
) -> None:
    from core.scenarios import FIXED, call
    from pages.summary import run_summary
    from pages.templatetags.harness import duration
    from runs.approval_flow.gate import DjangoApprovals
    from runs.services import drive_run
    from tests.helpers import World

    world = World()
    script = [
        call("write_file", path="src/calc.py", content=FIXED),
        call("run_check", check_id="tests"),
        call("finish", summary="fixed"),
    ]
    run = world.create(actor=operator, script=script)  # running, and no worker yet: its clocks tick
    page = signed_in(context, web, operator, f"/runs/{run.pk}/")
    conn = page.locator("#conn")
    outcome = page.locator('#summary [data-field="outcome"]')
    clock = page.locator('#summary [data-field="working"]')
    budget = page.locator('[data-budget="time"] [data-part="text"]')
    held = page.locator("#summary [data-clocks-held]")
    expect(conn).to_have_text("live", timeout=LIVE)
    expect(outcome).to_have_text("running")
    expect(held).to_be_hidden()

    web.stop()
    expect(conn).to_have_attribute("data-state", re.compile("reconnecting|disconnected"), timeout=LIVE)
    # Not "running" with a ticking clock: the last known, held, and said so.
    expect(outcome).to_have_text("last known: running")
    expect(held).to_contain_text(re.compile(r"No word from the server since \d\d:\d\d:\d\d: the status and times shown are the last known"))
    shown = clock.text_content(), budget.text_content()
    time.sleep(2.5)
    assert (clock.text_content(), budget.text_content()) == shown, "the clocks go on counting while offline"
    screenshot(page, f"run_offline_{size}")

    # The run ends while the page cannot hear of it.
    state = drive_run(run, world.environment(), DjangoApprovals(run))
    assert state.status == "complete", state.outcome
    run.refresh_from_db()
    final = run_summary(run)
    web.start()
    # the countdown may reconnect first (test_it_says_offline_and_when_the_server_stops_talking)
    with contextlib.suppress(PlaywrightTimeoutError):
        page.locator("#conn-retry").click(timeout=2000)
    expect(conn).to_have_text("live", timeout=LIVE)
    expect(outcome).to_have_text(final["outcome_label"], timeout=LIVE)
    expect(held).to_be_hidden()
    expect(clock).to_have_text(duration(final["working_seconds"]))
    expect(clock).not_to_have_attribute("data-clock-held", re.compile(".*"))
    expect(page.locator("#timeline")).to_contain_text("fixed")
    time.sleep(1.5)  # stopped: the final time stays
    expect(clock).to_have_text(duration(final["working_seconds"]))
    screenshot(page, f"run_back_after_stop_{size}")
    assert not_reloaded(page)


def test_it_updates_the_lists_live(web: AsgiServer, context: BrowserContext, size: str, operator: User, admin_user: User) -> None:
    first = waiting_scene(operator)
    runs = signed_in(context, web, admin_user, "/runs/")
    inbox = signed_in(context, web, admin_user, "/approvals/")
    control = signed_in(context, web, admin_user, "/control/")
    for page in (runs, inbox, control):
        expect(page.locator("#lists-conn")).to_have_text("live", timeout=LIVE)
    expect(runs.locator("#runs-rows tr")).to_have_count(1)
    expect(inbox.locator("#inbox-rows tr")).to_have_count(1)

    second = waiting_scene(operator)  # a new run, waiting for its reviewer
    expect(runs.locator("#runs-rows tr")).to_have_count(2, timeout=LIVE)
    expect(inbox.locator("#inbox-rows tr")).to_have_count(2, timeout=LIVE)
    expect(inbox.locator("#inbox-count")).to_have_text("2 waiting")
    expect(control.locator("#active-rows tr")).to_have_count(2, timeout=LIVE)
    expect(inbox.locator(f'#inbox-rows tr[data-request="{second.request.pk}"]')).to_contain_text(str(second.run.pk)[:8])

    kill(first.run, operator)
    row = control.locator("#active-rows tr", has_text="kill requested")
    expect(row).to_have_count(1, timeout=LIVE)
    expect(row.get_by_role("link", name=re.compile("Kill"))).to_have_count(0)
    expect(runs.locator("#runs-rows")).to_contain_text("kill requested", timeout=LIVE)
    expect(runs.locator("#runs-rows time").first).to_have_text("just now")
    # The kill cancels the first run's request at once: its row leaves the inbox live.
    expect(inbox.locator("#inbox-rows tr")).to_have_count(1, timeout=LIVE)
    expect(inbox.locator("#inbox-count")).to_have_text("1 waiting", timeout=LIVE)
    expect(inbox.locator("#approval-badge")).to_have_text("1", timeout=LIVE)
    review = box_of(inbox.locator(f'#inbox-rows tr[data-request="{second.request.pk}"]').get_by_role("link", name=re.compile("^Review")))
    assert review["x"] + review["width"] <= SIZES[size]["width"], "the Review button is on the screen"
    if size == "phone":
        screenshot(inbox, "approvals_inbox_phone")
    for page in (runs, inbox, control):
        assert not_reloaded(page)


def test_it_follows_the_request_on_the_approval_page(
    web: AsgiServer, context: BrowserContext, size: str, operator: User, reviewer: User
) -> None:
    scene = waiting_scene(operator)
    url = f"/approvals/{scene.request.pk}/"
    watching = signed_in(context, web, reviewer, url)
    deciding = context.new_page()
    deciding.goto(f"{web.url}{url}")
    expect(watching.locator("#conn")).to_have_text("live", timeout=LIVE)
    expect(watching.locator("#grant")).to_be_enabled()
    expect(watching.locator("#request-status")).to_have_text("waiting for a decision")
    # Its clocks hold while the server is not heard, and go on once it is again.
    watching.context.set_offline(True)
    expect(watching.locator('#run-clocks [data-field="waited"]')).to_have_attribute("data-clock-held", re.compile(r"^\d+$"), timeout=LIVE)
    expect(watching.locator("#run-clocks [data-clocks-held]")).to_contain_text("No word from the server since")
    watching.context.set_offline(False)
    expect(watching.locator("#conn")).to_have_text("live", timeout=LIVE)
    expect(watching.locator("#run-clocks [data-clocks-held]")).to_be_hidden(timeout=LIVE)
    expect(watching.locator('#run-clocks [data-field="waited"]')).not_to_have_attribute("data-clock-held", re.compile(".*"))

    deciding.fill("#id_reason", "not this week")
    deciding.click("#deny")
    expect(watching.locator("#request-status")).to_have_text("denied", timeout=LIVE)
    expect(watching.locator("#decision-state")).to_contain_text(f"Denied by {reviewer.username}")
    expect(watching.locator("#decision-state")).to_contain_text("not this week")
    expect(watching.locator("#grant")).to_be_disabled()
    expect(watching.locator("#deny")).to_be_disabled()
    assert not_reloaded(watching)

    # Expiry: the countdown reaches zero, the page asks the server, the buttons close.
    later = waiting_scene(operator)
    ApprovalRequest.objects.filter(pk=later.request.pk).update(expires_at=timezone.now() + timedelta(seconds=4))
    page = signed_in(context, web, reviewer, f"/approvals/{later.request.pk}/")
    expect(page.locator("#grant")).to_be_enabled()
    expect(page.locator("#decision-blocker")).to_contain_text("expired", timeout=LIVE)
    expect(page.locator("#grant")).to_be_disabled()
    expire_due()  # what the beat does: the request is recorded as expired
    expect(page.locator("#request-status")).to_have_text("expired", timeout=LIVE)
    expect(page.locator("#deny")).to_be_disabled()
    assert not_reloaded(page)
    screenshot(page, f"approval_expired_{size}")


def test_it_fits_a_phone_and_reaches_grant_by_keyboard(
    web: AsgiServer, context: BrowserContext, size: str, operator: User, reviewer: User
) -> None:
    scene = waiting_scene(operator)
    page = signed_in(context, web, reviewer, f"/approvals/{scene.request.pk}/")
    width = SIZES[size]["width"]
    assert page.evaluate("document.documentElement.scrollWidth") <= width
    diff = box_of(page.locator(".diff"))
    decision = box_of(page.locator("#decision"))
    assert diff["width"] >= 300
    if size == "phone":
        assert decision["y"] > diff["y"], "one column: the diff comes before the decision"
        assert box_of(page.locator("#decision"))["y"] < box_of(page.locator("#timeline"))["y"]
    for name in ("Sign out", "Approvals"):
        box = box_of(page.get_by_role("button" if name == "Sign out" else "link", name=name, exact=False).first)
        assert box["x"] >= 0 and box["x"] + box["width"] <= width, name
    expect(page.locator("#what-it-does")).to_contain_text("outbox")
    screenshot(page, f"approval_{size}")
    why = page.get_by_role("heading", name="Why a reviewer is asked")
    why.scroll_into_view_if_needed()
    expect(why).to_be_in_viewport()

    # The skip link is the first stop; from it, Grant is within five more.
    page.goto(page.url)
    page.keyboard.press("Tab")
    expect(page.locator(".skip-link")).to_be_focused()
    page.keyboard.press("Enter")
    for stops in range(1, 6):
        page.keyboard.press("Tab")
        if page.evaluate("document.activeElement.id") == "grant":
            break
    else:
        raise AssertionError("Grant is not within 5 Tab stops after the skip link")
    page.locator("body").click(position={"x": 1, "y": 1})
    page.keyboard.press("d")
    expect(page.locator("#decision")).to_be_focused()

    # Times in the viewer's zone (New York here), UTC on hover, one format.
    when = page.locator(".approval-side time[data-when=full]").last
    expect(when).to_have_text(re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d (EST|EDT|GMT-[45])$"))
    expect(when).to_have_attribute("title", re.compile(r" UTC$"))
    utc = scene.request.created_at
    title = when.get_attribute("title")
    assert title is not None and title.startswith(f"{utc:%Y-%m-%d %H:%M}")

    run = context.new_page()
    run.goto(f"{web.url}/runs/{scene.run.pk}/")
    assert run.evaluate("document.documentElement.scrollWidth") <= width
    expect(run.locator("#timeline li.step").first).to_be_visible()
    assert box_of(run.locator("#timeline"))["width"] >= min(300, width - 40)
    if size == "laptop":  # the sticky sidebar fits the screen: its end can be scrolled to
        assert box_of(run.locator("#summary"))["height"] <= SIZES[size]["height"]
        last = run.locator("#summary [data-list=approvals]")
        last.scroll_into_view_if_needed()
        expect(last).to_be_in_viewport()
    screenshot(run, f"run_{size}")


def test_it_shows_the_switches_on_every_page_and_refuses_new_runs(
    web: AsgiServer, context: BrowserContext, size: str, operator: User, admin_user: User
) -> None:
    page = signed_in(context, web, admin_user, "/control/")
    expect(page.locator("#switch-banner")).to_have_count(0)
    expect(page.locator("#switch-changed")).to_contain_text("Never changed")
    page.locator("#switch-panels input[name=confirm]").check()
    page.click("#stop-all")
    expect(page.locator(".flash")).to_contain_text("Stop all runs is on")
    for path in ("/runs/", "/approvals/", "/runs/new/"):
        page.goto(f"{web.url}{path}")
        expect(page.locator("#switch-banner")).to_contain_text("Stop all runs is on")
    page.select_option("#id_template", "demo")
    page.click("text=Start run")
    expect(page.locator(".error-box")).to_contain_text("'Stop all runs' is on")
    expect(page.locator(".error-box")).not_to_contain_text("(run)")
    if size == "phone":
        screenshot(page, "new_run_refused_phone")

    set_global(admin_user, stop_all=False, admit_new=False)
    page.goto(f"{web.url}/runs/new/")
    expect(page.locator("#switch-banner")).to_contain_text("New runs are paused")
    page.select_option("#id_template", "demo")
    page.click("text=Start run")
    expect(page.locator(".error-box")).to_contain_text("admits no new runs")
    page.goto(f"{web.url}/control/")
    expect(page.locator("#switch-changed")).to_contain_text(f"Last changed by {admin_user.username}")


# The admin's pages: test_browser_admin.
PHONE_PICTURES = {"output": "check_output_phone"}


def test_it_has_no_serious_accessibility_problems_and_fits_the_screen(
    web: AsgiServer, context: BrowserContext, size: str, operator: User, reviewer: User, admin_user: User
) -> None:
    from axe_playwright_python.sync_playwright import Axe

    from runs.models import Evidence
    from runs.persistence.artifacts import ArtifactStorage

    scene = waiting_scene(operator)
    evidence = Evidence.objects.filter(run=scene.run).first()
    assert evidence is not None
    evidence.output_ref = ArtifactStorage().put(b"collected 3 items\n3 passed in 0.02s\n", "text/plain")
    evidence.save()
    axe = Axe()
    page = context.new_page()
    width = SIZES[size]["width"]
    problems: list[str] = []

    def check(name: str) -> None:
        results = axe.run(page)
        for violation in results.response["violations"]:
            if violation["impact"] in ("serious", "critical"):
                targets = [node["target"] for node in violation["nodes"]][:3]
                problems.append(f"{name}: {violation['id']} ({violation['impact']}): {violation['help']} at {targets}")
        # Nothing runs off the side: the page itself never scrolls sideways.
        if page.evaluate("document.documentElement.scrollWidth") > width:
            problems.append(f"{name}: wider than the {width} px screen")
        # Every link of the top bar is on the screen (an admin has the most).
        for link in page.locator("nav.nav a").all():
            box = link.bounding_box()
            if box is None or box["x"] < 0 or box["x"] + box["width"] > width:
                problems.append(f"{name}: the top bar's {(link.text_content() or '').strip()!r} is off the screen")

    page.goto(f"{web.url}/accounts/login/")
    check("sign in")
    sign_in(page, web, admin_user.username)
    for name, path in {
        "runs": "/runs/",
        "run": f"/runs/{scene.run.pk}/",
        "output": f"/runs/{scene.run.pk}/artifacts/{evidence.output_ref}/",
        "approvals": "/approvals/",
        "approval": f"/approvals/{scene.request.pk}/",
        "new run": "/runs/new/",
        "control": "/control/",
        "kill": f"/runs/{scene.run.pk}/kill/",
    }.items():
        page.goto(f"{web.url}{path}")
        check(name)
        if size == "phone" and name in PHONE_PICTURES:
            screenshot(page, PHONE_PICTURES[name])
    assert not problems, "\n".join(problems)


def test_it_takes_an_admin_from_a_version_to_a_new_one_and_compares_them(
    web: AsgiServer, context: BrowserContext, size: str, admin_user: User
) -> None:
    from approvals.policies import current_policy_row

    first = current_policy_row()
    page = signed_in(context, web, admin_user, "/admin/approvals/policyversion/")
    page.get_by_role("link", name=f"new version from v{first.version}").click()
    expect(page.locator("#content")).to_contain_text(f"starting from v{first.version}")
    page.select_option("select[name=rules-0-decision]", "deny")
    page.fill("input[name=note]", "no listing")
    # Refused first: every problem in words, named as the page labels the field.
    page.fill("input[name=approval_ttl_seconds]", "0")
    page.fill("input[name=checks-0-check_id]", "Unit Tests")
    page.click("input[name=_save]")
    problems = page.locator("#policy-problems")
    expect(problems).to_contain_text("Approval TTL (seconds): must be at least 1")
    expect(problems).to_contain_text("Check row 1, check id: must be 1 to 64 lowercase letters")
    expect(page.locator(".field-approval_ttl_seconds .errorlist")).to_have_text("must be at least 1")
    expect(page.locator("#content")).not_to_contain_text("should")
    screenshot(page, f"policy_errors_{size}")
    page.fill("input[name=approval_ttl_seconds]", "3600")
    page.fill("input[name=checks-0-check_id]", "tests")
    page.click("input[name=_save]")
    new_version = first.version + 1
    page.get_by_role("link", name=f"Compare with v{first.version}").click()
    expect(page).to_have_url(re.compile(rf"/compare/\?project=default&old={first.version}&new={new_version}$"))
    if size == "phone":  # two columns do not fit: it starts unified, side by side is one press away
        expect(page.locator(".diff-unified")).to_be_visible()
        screenshot(page, "policy_compare_phone")
        page.get_by_role("button", name="Side by side").click()
    expect(page.locator(".diff-split")).to_be_visible()
    expect(page.locator(".diff-split td.d-add").first).to_have_css("background-color", "rgb(230, 255, 236)")
    expect(page.locator(".diff-split td.d-del").first).to_contain_text('"allow"')
    if size == "laptop":
        screenshot(page, "policy_compare_laptop")


def test_it_shows_the_working_clock_and_the_time_budget_alike_while_they_tick(
    web: AsgiServer, context: BrowserContext, size: str, operator: User
) -> None:
    from tests.helpers import World

    run = World().create(actor=operator)  # running, and no worker: its clocks only tick
    page = signed_in(context, web, operator, f"/runs/{run.pk}/")
    clock = page.locator('#summary [data-field="working"]')
    budget = page.locator('[data-budget="time"] [data-part="text"]')
    expect(clock).to_have_text(re.compile(r"^\d+s$"))
    seen = set()
    deadline = time.monotonic() + 6
    while time.monotonic() < deadline:
        # Both read in one go, between two of the page's ticks.
        shown = page.evaluate(
            """() => [document.querySelector('#summary [data-field="working"]').textContent,
                      document.querySelector('[data-budget="time"] [data-part="text"]').textContent]"""
        )
        working, used = shown
        assert used == f"{working.removesuffix('s')}s / 600s", shown
        seen.add(working)
        time.sleep(0.15)
    assert len(seen) >= 3, f"the clocks do not tick: {seen}"
    expect(budget).to_have_text(re.compile(r"^\d+s / 600s$"))


def test_it_lands_a_reviewer_on_the_inbox_and_never_resends_a_refused_grant(
    web: AsgiServer, context: BrowserContext, size: str, operator: User, reviewer: User
) -> None:
    from tests.helpers import new_policy_version

    scene = waiting_scene(operator)
    page = context.new_page()
    sign_in(page, web, reviewer.username)
    expect(page).to_have_url(f"{web.url}/approvals/")
    row = page.locator(f'#inbox-rows tr[data-request="{scene.request.pk}"]')
    expect(row).to_contain_text(str(scene.run.pk)[:8])
    expect(row.locator(".faint time[data-when=ago]")).to_have_text("just now")  # when the run started
    row.get_by_role("link", name=re.compile("^Review")).click()
    expect(page.locator("#grant")).to_be_enabled()

    # While the page is open an admin changes the policy: the server refuses the grant
    # (the page cannot know; a decision in another tab would close its buttons first).
    new_policy_version(approval_ttl_seconds=600)
    page.locator(".grant-comment summary").click()
    page.fill("#id_comment", "looks right")
    posts: list[str] = []
    page.on("request", lambda request: posts.append(request.url) if request.method == "POST" else None)
    page.click("#grant")
    expect(page.locator("#decision .error-box")).to_contain_text("stale")
    expect(page).to_have_url(f"{web.url}/approvals/{scene.request.pk}/")
    assert len(posts) == 1
    page.reload()  # a GET: the refused grant is not sent again
    expect(page.locator("#request-status")).to_have_text("out of date")
    expect(page.locator("#decision .error-box")).to_have_count(0)  # the refusal was shown once
    assert len(posts) == 1, posts


def test_it_keeps_the_reason_of_a_kill_and_the_comment_of_a_grant_in_the_trace(
    web: AsgiServer, context: BrowserContext, size: str, operator: User, reviewer: User
) -> None:
    killed, granted = waiting_scene(operator), waiting_scene(operator)
    page = signed_in(context, web, operator, f"/runs/{killed.run.pk}/")
    page.click('[data-field="kill"]')
    page.fill("#kill-reason", "wrong repository")
    page.click("#confirm-kill")
    expect(page.locator("#timeline")).to_contain_text(f"by {operator.username} for this run: wrong repository", timeout=LIVE)
    page.goto(f"{web.url}/approvals/")
    expect(page.locator("table.table").last).to_contain_text(f"killed by {operator.username}: wrong repository")

    assert context.browser is not None
    decider = context.browser.new_context(viewport=SIZES[size], timezone_id="America/New_York")
    try:
        review = decider.new_page()
        sign_in(review, web, reviewer.username)
        review.goto(f"{web.url}/approvals/{granted.request.pk}/")
        review.locator(".grant-comment summary").click()
        review.fill("#id_comment", "checked the diff with the team")
        review.click("#grant")
        review.wait_for_url(f"**/runs/{granted.run.pk}/")
        expect(review.locator("#timeline")).to_contain_text("checked the diff with the team", timeout=LIVE)
    finally:
        decider.close()


def test_it_fills_in_the_base_revision_once_the_workspace_is_prepared(
    web: AsgiServer, context: BrowserContext, size: str, admin_user: User
) -> None:
    from runs.approval_flow.gate import DjangoApprovals
    from runs.models import Run
    from runs.runtime import create_run, record_base_revision
    from runs.scheduling import leases
    from runs.services import drive_run
    from tests.helpers import STARTABLE, World

    # Made by the web process: no workspace until a worker prepares one.
    run = create_run(STARTABLE, {"kind": "scripted", "script": []}, admin_user)
    page = signed_in(context, web, admin_user, f"/runs/{run.pk}/")
    base = page.locator('#summary [data-field="base"]')
    expect(base).to_have_text("no workspace yet")
    world = World()
    token = leases.acquire(str(run.pk), "test-worker")
    assert token is not None
    record_base_revision(run, world.workspace.revision, token)
    leases.release(str(run.pk), token)
    # The run ends without writing: its events bring the page its base, unchanged.
    drive_run(Run.objects.get(pk=run.pk), world.environment(), DjangoApprovals(run))
    expect(base).to_have_text(f"{world.workspace.revision()[:12]} unchanged", timeout=LIVE)
    expect(base.locator("code")).to_have_count(1)
