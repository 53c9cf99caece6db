"""Counts that respect scope, in a real browser at a laptop's and a phone's width: the
header's Approvals badge, its live refresh and the inbox count the same requests (the
viewer's projects' alone, pages.inbox.waiting_for), the inbox shows a quorum's
progress, and its "Recent decisions" cells sit under their own headings."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Group, User
from playwright.sync_api import BrowserContext, expect

from projects.models import Project
from runs.approval_flow.flow import deny, grant
from tests.fixtures_web import SIZES, AsgiServer, screenshot, serious_problems, sign_in, waiting_scene
from tests.test_browser_projects import publish_needs_two

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_it_counts_only_the_viewers_projects_everywhere(
    live_server_asgi: AsgiServer, context: BrowserContext, size: str, operator: User, reviewer: User, other_project: Project
) -> None:
    publish_needs_two()
    here = waiting_scene(operator)
    # Another project's requests: the reviewer is no member there, so nothing of them
    # is counted for them, not even how many there are.
    for _ in range(2):
        waiting_scene(operator, project_id=other_project.pk)
    colleague = User.objects.create_user(username="ria", password="ria-pass-123")
    colleague.groups.add(Group.objects.get(name="reviewer"))
    grant(here.request, colleague)
    decided = waiting_scene(operator)
    deny(decided.request, reviewer, "not this one")

    page = context.new_page()
    sign_in(page, live_server_asgi, reviewer.username)
    page.goto(f"{live_server_asgi.url}/approvals/")
    expect(page.locator("#inbox-count")).to_have_text("1 waiting")
    # The badge as the server drew it, then as its live refresh tells it: the same.
    expect(page.locator("#approval-badge")).to_have_text("1")
    assert page.evaluate("fetch('/approvals/count/').then(r => r.json())") == {"pending": 1}
    # A quorum's progress in the queue, not only on the request's page.
    row = page.locator(f"tr[data-request='{here.request.pk}']")
    expect(row.locator("[data-quorum]")).to_have_text("1 of 2 grants")

    # Each decision's cells under their headings: the project under "Project", the
    # status under "Status", the reviewer under "By".
    table = page.locator("table", has=page.locator("#recent-rows"))
    headings = [text.strip() for text in table.locator("thead th").all_text_contents()]
    cells = [text.strip() for text in table.locator("#recent-rows tr").first.locator("td").all_text_contents()]
    assert len(cells) == len(headings), (headings, cells)
    by_heading = dict(zip(headings, cells, strict=True))
    assert by_heading["Project"] == "default"
    assert by_heading["Status"] == "denied"
    assert by_heading["By"] == reviewer.username
    assert by_heading["Reason"] == "not this one"

    problems = serious_problems(page, "approvals", SIZES[size]["width"])
    screenshot(page, f"counts_inbox_{size}")
    # Anywhere else the badge is drawn, it says the same.
    page.goto(f"{live_server_asgi.url}/runs/")
    expect(page.locator("#approval-badge")).to_have_text("1")
    assert not problems, "\n".join(problems)
