"""The admin in a real browser (Chromium through Playwright, against Daphne), at a
laptop's 1366 and a phone's 390 px: every page a site admin or a project's admin
reaches from the admin's index (each list, its first entry, its add form) and the
policy pages (editor, JSON editor, a version, compare) pass axe-core's serious and
critical checks and fit the screen; the policy editor's rows stay inside their panel."""

from __future__ import annotations

import re

import pytest
from django.contrib.auth.models import User
from django.utils import timezone
from playwright.sync_api import BrowserContext, Page, expect

from projects.models import Project
from tests.fixtures_web import SIZES, AsgiServer, screenshot, serious_problems, sign_in

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def admin_scene(by: User, other_project: Project) -> dict[str, str]:
    """Something on every admin page of the default project (a second policy version,
    an API token, a webhook endpoint with a failed delivery, an MCP server, an audit
    entry) and a second project; the policy pages that no list links to."""
    from api.models import ApiToken
    from approvals.models import PolicyVersion
    from notifications.models import Delivery, DeliveryAttempt, WebhookEndpoint
    from projects.audit import record
    from projects.models import McpServer
    from runs.models import Event
    from tests.fixtures_web import waiting_scene
    from tests.helpers import new_policy_version

    scene = waiting_scene(by)
    new_policy_version(approval_ttl_seconds=900)
    first, latest = PolicyVersion.objects.filter(project=scene.run.project).order_by("version")[:2]
    ApiToken.issue(by)
    endpoint = WebhookEndpoint.objects.create(
        name="ops channel", url="https://hooks.example.com/harness", event_kinds=["approval_requested"], project=scene.run.project
    )
    event = Event.objects.filter(run=scene.run).order_by("-seq").first()
    assert event is not None
    delivery = Delivery.objects.create(endpoint=endpoint, event=event, kind="approval_requested", payload={"text": "publish waits"})
    DeliveryAttempt.objects.create(delivery=delivery, number=1, at=timezone.now(), status_code=503, duration_ms=41)
    McpServer.objects.create(project=scene.run.project, name="tracker", url="http://127.0.0.1:9/mcp", lookup_tool="find")
    record(scene.run.project, by, "policy_saved", version=latest.version)
    slug = scene.run.project.slug
    return {
        "policy editor": f"/admin/approvals/policyversion/add/?project={slug}",
        "policy editor as JSON": f"/admin/approvals/policyversion/add/?project={slug}&json=1",
        "policy version": f"/admin/approvals/policyversion/{latest.pk}/change/",
        "policy compare": f"/admin/approvals/policyversion/compare/?project={slug}&old={first.version}&new={latest.version}",
    }


def index_pages(page: Page) -> list[str]:
    """The lists and add forms the admin's index offers this user."""
    hrefs = page.eval_on_selector_all("#content-main a[href]", "links => links.map(a => a.getAttribute('href'))")
    return sorted({href for href in hrefs if re.fullmatch(r"/admin/\w+/\w+/(add/)?", href)})


@pytest.fixture(params=["site admin", "project admin"])
def persona(request: pytest.FixtureRequest, admin_user: User, project_admin: User) -> User:
    return admin_user if request.param == "site admin" else project_admin


PHONE_PICTURES = {
    "/admin/approvals/policyversion/": "policies_phone",
    "policy version": "policy_version_phone",
    "/admin/api/apitoken/": "api_tokens_phone",
}


def test_it_has_no_serious_accessibility_problems_on_the_admin_pages_and_fits_the_screen(
    live_server_asgi: AsgiServer, context: BrowserContext, size: str, persona: User, admin_user: User, other_project: Project
) -> None:
    extra = admin_scene(admin_user, other_project)
    width = SIZES[size]["width"]
    page = context.new_page()
    sign_in(page, live_server_asgi, persona.username)
    problems: list[str] = []
    checked: list[str] = []

    def check(name: str, path: str) -> None:
        answer = page.goto(f"{live_server_asgi.url}{path}")
        assert answer is not None and answer.status == 200, (name, path, answer and answer.status)
        problems.extend(serious_problems(page, f"{persona.username} {name}", width))
        checked.append(path)
        if size == "phone" and persona.is_superuser and name in PHONE_PICTURES:
            screenshot(page, PHONE_PICTURES[name])

    check("admin home", "/admin/")
    lists = index_pages(page)
    if persona == admin_user:
        # Who may sign in, and what a provider's group gives, where a site admin looks first.
        for path in ("/admin/auth/user/", "/admin/auth/group/", "/admin/signin/groupmapping/", "/admin/signin/identity/"):
            assert path in lists, (path, lists)
        screenshot(page, f"admin_home_{size}")
    assert "/admin/approvals/policyversion/" in lists and "/admin/projects/membership/" in lists, lists
    for path in lists:
        check(path, path)
        if path.endswith("/add/"):
            continue
        first = page.locator("#result_list tbody tr a[href]").first
        if first.count():
            entry = first.get_attribute("href")
            assert entry is not None
            check(f"first of {path}", entry)
    for name, path in extra.items():
        check(name, path)
    assert len(checked) >= 15, checked
    assert not problems, "\n".join(problems)


def test_it_keeps_the_policy_rows_inside_their_panel(
    live_server_asgi: AsgiServer, context: BrowserContext, size: str, admin_user: User
) -> None:
    page = context.new_page()
    sign_in(page, live_server_asgi, admin_user.username)
    page.goto(f"{live_server_asgi.url}/admin/approvals/policyversion/add/?project=default")
    width = SIZES[size]["width"]
    for group in ("#rules-group", "#checks-group"):
        # Nothing of a row is past the panel's edge, nor hidden behind a sideways scroll.
        spill = page.evaluate(
            """(group) => {
                const box = document.querySelector(group);
                const edge = box.getBoundingClientRect().right;
                const past = [...box.querySelectorAll("input, select, textarea, label, th")]
                    .filter((node) => node.getClientRects().length && node.getBoundingClientRect().right > edge + 0.5)
                    .map((node) => node.name || node.textContent.trim());
                const scroller = box.querySelector(".tabular");
                return {past, scrolls: scroller.scrollWidth > scroller.clientWidth};
            }""",
            group,
        )
        assert spill == {"past": [], "scrolls": False}, (group, spill)
    tool = page.locator("#id_rules-0-tool")
    if size == "phone":  # a card per row: each field with its label above it
        expect(page.locator("#rules-group thead")).to_be_hidden()
        expect(page.locator("label[for=id_rules-0-tool]")).to_be_visible()
        expect(page.locator("label[for=id_rules-0-tool]")).to_contain_text("tool name or glob")
        expect(page.locator("#rules-0 .row-name")).to_have_text("Rule 1")
    else:
        expect(page.locator("#rules-group thead")).to_be_visible()
        expect(page.locator("label[for=id_rules-0-tool]")).to_be_hidden()
    expect(tool).to_have_accessible_name("Tool, rule 1")
    assert serious_problems(page, "policy editor", width) == []
    page.locator("#rules-group").scroll_into_view_if_needed()
    page.evaluate("document.getElementById('rules-group').scrollIntoView()")
    screenshot(page, f"policy_rules_{size}")
    page.evaluate("document.getElementById('checks-group').scrollIntoView()")
    screenshot(page, f"policy_checks_{size}")
