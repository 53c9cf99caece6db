"""Smaller findings of the walk through the pages (issue 30), each shown: the stop-all
confirmation is a warning, a check still needed is said in words, the approval page's
trace does not link to the page itself, a run started from the command line says so,
and in a real browser the skip link's target lands below the top bar and the muted
"same revision" flag is axe clean."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse
from playwright.sync_api import BrowserContext, expect

from core import events as ev
from live.trace import _describe
from runs.approval_flow.flow import grant
from runs.approval_flow.gate import DjangoApprovals
from runs.services import drive_run
from tests.fixtures_web import SIZES, AsgiServer, screenshot, serious_problems, sign_in, waiting_scene
from tests.helpers import World


def signed_in(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


@pytest.mark.django_db
def test_it_confirms_stopping_every_run_as_a_warning(admin_user: User) -> None:
    page = signed_in(admin_user).post(reverse("control"), {"action": "stop_all", "confirm": "on"}, follow=True).content.decode()
    assert '<li class="flash-warning">Stop all runs is on' in page and "flash-success" not in page


def test_it_says_which_check_must_pass_in_words() -> None:
    required = ev.CheckRequired(run_id="r", seq=3, ts=0.0, revision="a" * 40, missing=["tests", "lint"], for_tool="publish")
    assert _describe(required)[2] == "publish needs tests and lint to pass on revision aaaaaaaaaaaa first"


@pytest.mark.django_db
def test_it_leaves_out_the_approval_pages_link_to_itself_and_names_the_command_line(operator: User, reviewer: User) -> None:
    scene = waiting_scene(operator)
    url = reverse("approvals:detail", args=[scene.request.pk])
    page = signed_in(reviewer).get(url).content.decode()
    assert "Approval required" in page and f'href="{url}"' not in page
    assert f'href="{url}"' in signed_in(operator).get(reverse("runs:detail", args=[scene.run.pk])).content.decode()
    by_command = World().create(actor=None)
    assert "started by the command line" in signed_in(operator).get(reverse("runs:detail", args=[by_command.pk])).content.decode()


@pytest.mark.browser
@pytest.mark.django_db(transaction=True)
def test_it_lands_the_skip_link_below_the_top_bar_and_keeps_the_muted_flag_readable(
    live_server_asgi: AsgiServer, context: BrowserContext, size: str, operator: User, reviewer: User, resumes: list[str]
) -> None:
    scene = waiting_scene(operator)
    grant(scene.request, reviewer)
    drive_run(scene.run, scene.world.environment(), DjangoApprovals(scene.run))
    page = context.new_page()
    sign_in(page, live_server_asgi, reviewer.username)
    page.goto(f"{live_server_asgi.url}/approvals/{scene.request.pk}/")
    expect(page.locator("#revision-panel")).to_contain_text("same revision as the workspace")
    problems = serious_problems(page, "a used request", SIZES[size]["width"])
    page.keyboard.press("Tab")
    expect(page.locator(".skip-link")).to_be_focused()
    page.keyboard.press("Enter")
    page.wait_for_timeout(300)
    top_bar = page.locator(".topbar").bounding_box()
    heading = page.locator("#decision-title").bounding_box()
    assert top_bar is not None and heading is not None
    assert heading["y"] >= top_bar["y"] + top_bar["height"], (heading, top_bar)
    screenshot(page, f"skip_to_decision_{size}")
    assert not problems, "\n".join(problems)


@pytest.mark.django_db
def test_it_names_a_refused_denial_on_the_requests_own_url(operator: User, reviewer: User) -> None:
    scene = waiting_scene(operator)
    response = signed_in(reviewer).post(reverse("approvals:deny", args=[scene.request.pk]), {"reason": "  "}, follow=True)
    assert response.redirect_chain == [(reverse("approvals:detail", args=[scene.request.pk]), 302)]
    assert "Reason for denying: write why; the run stops with it and the trace keeps it." in response.content.decode()
    scene.request.refresh_from_db()
    assert scene.request.status == "pending"


@pytest.mark.browser
@pytest.mark.django_db(transaction=True)
def test_it_moves_the_focus_to_the_problems_of_a_refused_new_run(
    live_server_asgi: AsgiServer, context: BrowserContext, size: str, operator: User
) -> None:
    page = context.new_page()
    sign_in(page, live_server_asgi, operator.username)
    page.goto(f"{live_server_asgi.url}/runs/new/")
    page.fill("#id_contract", '{"task_id": 5}')
    page.locator("#new-run-form button[type=submit]").click()
    expect(page.locator("#form-problems")).to_be_focused()
    expect(page.locator("#form-problems")).to_contain_text("The run was not started.")
