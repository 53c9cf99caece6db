"""A project's own pages in a real browser, at a laptop's and a phone's width, axe
clean and fitting the screen: the runs list with queued runs and their place, the
project's switch used by its operator, its audit read by its admin, and a person's
API tokens page (a narrowed token made, shown once, and revoked)."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from playwright.sync_api import BrowserContext, Page, expect

from api.models import ApiToken
from projects.models import AuditEntry, Membership, Project, Role
from runs.models import Run
from runs.runtime import create_run
from tests.fixtures_web import SIZES, AsgiServer, screenshot, serious_problems, sign_in
from tests.test_api import SCRIPT, SMALL_CONTRACT

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def open_page(page: Page, server: AsgiServer, path: str) -> None:
    answer = page.goto(f"{server.url}{path}")
    assert answer is not None and answer.status == 200, path


def test_it_shows_queued_runs_and_lets_the_projects_operator_and_admin_use_its_switch_and_audit(
    live_server_asgi: AsgiServer, context: BrowserContext, size: str, other_project: Project, other_member: User
) -> None:
    other_project.max_active_runs = 1
    other_project.save()
    runs = [create_run({**SMALL_CONTRACT, "task_id": f"queued-{n}"}, SCRIPT, other_member, enqueue=False) for n in range(3)]
    assert [run.holds_slot for run in runs] == [True, False, False]
    Membership.objects.create(project=other_project, user=other_member, role=Role.ADMIN)
    width = SIZES[size]["width"]
    page = context.new_page()
    sign_in(page, live_server_asgi, other_member.username)
    problems: list[str] = []

    open_page(page, live_server_asgi, "/runs/")
    expect(page.locator("[data-queued='1']")).to_have_count(1)
    expect(page.locator("[data-queued='2']")).to_have_count(1)
    expect(page.locator(".queue-reason").first).to_contain_text("1")
    problems += serious_problems(page, "runs with a queue", width)
    screenshot(page, f"project_queue_{size}")

    open_page(page, live_server_asgi, "/control/")
    switch = page.locator("[data-project='elsewhere']")
    expect(switch).to_contain_text("1 active of at most 1 · 2 queued")
    switch.get_by_role("button", name="Pause new runs").click()
    expect(page.locator("[data-project='elsewhere']")).to_contain_text("paused: new runs are refused")
    problems += serious_problems(page, "project switch", width)
    screenshot(page, f"project_switch_{size}")
    assert Project.objects.get(pk=other_project.pk).paused

    page.locator("[data-project='elsewhere']").get_by_role("link", name="Audit of elsewhere").click()
    expect(page.locator("#audit")).to_contain_text("project paused")
    expect(page.locator("#audit")).to_contain_text(other_member.username)
    problems += serious_problems(page, "audit", width)
    screenshot(page, f"project_audit_{size}")
    assert not problems, "\n".join(problems)
    assert Run.objects.filter(project=other_project).count() == 3


def test_it_makes_a_narrowed_token_shows_it_once_and_revokes_it(
    live_server_asgi: AsgiServer, context: BrowserContext, size: str, other_project: Project, other_member: User
) -> None:
    width = SIZES[size]["width"]
    page = context.new_page()
    sign_in(page, live_server_asgi, other_member.username)
    page.get_by_role("link", name="API tokens").click()
    expect(page.locator("#tokens")).to_contain_text("You have no API token.")
    problems = serious_problems(page, "tokens", width)

    # A role the member does not hold there is refused, named at once.
    page.select_option("#id_project", "elsewhere")
    page.select_option("#id_role", "admin")
    page.click("#make-token")
    expect(page.locator("#token-problems")).to_contain_text("You do not hold the admin role")
    problems += serious_problems(page, "tokens refused", width)

    page.select_option("#id_project", "elsewhere")
    page.select_option("#id_role", "operator")
    page.click("#make-token")
    shown = page.locator("#token-value").inner_text().strip()
    row = ApiToken.objects.get(user=other_member)
    assert row.project == other_project and row.role == "operator" and ApiToken.find(shown) == row
    expect(page.locator("#tokens")).to_contain_text("operator in elsewhere")
    problems += serious_problems(page, "token made", width)
    screenshot(page, f"tokens_{size}")
    open_page(page, live_server_asgi, "/tokens/")
    assert shown not in page.content(), "a token is shown once"

    page.get_by_role("button", name=f"Revoke token {row.prefix}").click()
    expect(page.locator("#tokens")).to_contain_text("revoked")
    row.refresh_from_db()
    assert row.revoked_at is not None and ApiToken.find(shown) is None
    assert AuditEntry.objects.filter(project=other_project, action="token_revoked", actor=other_member).exists()
    assert not problems, "\n".join(problems)
