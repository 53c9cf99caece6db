"""Projects in a real browser (Chromium through Playwright, against Daphne), at a
laptop's and a phone's width: a member of two projects sees both projects' runs and
requests and nobody else's; the approval page shows a quorum's progress and offers
"request changes"; the pages pass axe-core's serious and critical checks and fit the
screen."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import Group, User
from playwright.sync_api import BrowserContext, expect

from projects.models import Membership, Project, Role
from runs.approval_flow.flow import grant
from tests.fixtures_web import SIZES, AsgiServer, screenshot, serious_problems, sign_in, waiting_scene
from tests.helpers import edited_policy, new_policy_version

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def publish_needs_two() -> None:
    rules = edited_policy()["rules"]
    assert isinstance(rules, list)
    new_policy_version(rules=[{**rule, "reviewers": {"count": 2}} if rule["tool"] == "publish" else rule for rule in rules])


def test_it_shows_a_member_of_two_projects_both_and_a_quorums_progress(
    live_server_asgi: AsgiServer,
    context: BrowserContext,
    size: str,
    operator: User,
    reviewer: User,
    other_project: Project,
    other_member: User,
) -> None:
    publish_needs_two()
    here = waiting_scene(operator)
    there = waiting_scene(operator, project_id=other_project.pk)
    third = Project.objects.create(slug="third", name="Third")
    hidden = waiting_scene(operator, project_id=third.pk)
    # The reviewer is one of the default project's (through the reviewer group) and
    # now of the other project too; the third project is nobody's here.
    Membership.objects.create(project=other_project, user=reviewer, role=Role.REVIEWER)
    colleague = User.objects.create_user(username="ria", password="ria-pass-123")
    colleague.groups.add(Group.objects.get(name="reviewer"))
    grant(here.request, colleague)

    page = context.new_page()
    sign_in(page, live_server_asgi, reviewer.username)
    width = SIZES[size]["width"]
    problems: list[str] = []
    seen: dict[str, Any] = {}
    for name, path in {"runs": "/runs/", "approvals": "/approvals/"}.items():
        page.goto(f"{live_server_asgi.url}{path}")
        text = page.content()
        seen[name] = (str(here.run.pk) in text or str(here.request.pk) in text, str(there.run.pk) in text or str(there.request.pk) in text)
        assert str(hidden.run.pk) not in text and str(hidden.request.pk) not in text, name
        problems += serious_problems(page, name, width)
        screenshot(page, f"projects_{name}_{size}")
    assert seen == {"runs": (True, True), "approvals": (True, True)}

    page.goto(f"{live_server_asgi.url}/approvals/{here.request.pk}/")
    expect(page.locator("#quorum")).to_contain_text("1 of 2")
    expect(page.locator("#quorum")).to_contain_text("ria")
    expect(page.locator("#request-changes")).to_be_enabled()
    problems += serious_problems(page, "approval", width)
    screenshot(page, f"projects_quorum_{size}")
    # Another project's request is as unknown as none.
    answer = page.goto(f"{live_server_asgi.url}/approvals/{hidden.request.pk}/")
    assert answer is not None and answer.status == 404
    assert not problems, "\n".join(problems)


def test_it_sends_a_reviewers_words_from_the_approval_page(
    live_server_asgi: AsgiServer, context: BrowserContext, size: str, operator: User, reviewer: User
) -> None:
    scene = waiting_scene(operator)
    page = context.new_page()
    sign_in(page, live_server_asgi, reviewer.username)
    page.goto(f"{live_server_asgi.url}/approvals/{scene.request.pk}/")
    page.fill("#id_message", "Name the ticket, ORD-12, in the commit message.")
    page.click("#request-changes")
    page.wait_for_url(f"**/runs/{scene.run.pk}/")
    expect(page.locator("body")).to_contain_text("Changes requested")
    scene.request.refresh_from_db()
    assert scene.request.status == "changes_requested"
    screenshot(page, f"projects_changes_requested_{size}")
