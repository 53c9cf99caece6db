"""Outcomes told truly, in a real browser at a laptop's and a phone's width, axe clean:
a run whose reviewer's requested changes were ignored leads its result with that (not
green), a one-run kill says who and why on the run page, and a queued run reads
"queued" with its clocks still. (The inbox count against the badge for a member of
another project: tests/test_browser_counts.py.)"""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from playwright.sync_api import BrowserContext, expect

from projects.models import Project
from runs.approval_flow.flow import request_changes
from runs.control import kill
from runs.runtime import create_run
from tests.fixtures_web import SIZES, AsgiServer, screenshot, serious_problems, sign_in, waiting_scene
from tests.test_api import SCRIPT, SMALL_CONTRACT
from tests.test_told_everywhere import drive

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_it_leads_the_result_of_a_run_that_ignored_requested_changes_with_them(
    live_server_asgi: AsgiServer, context: BrowserContext, size: str, operator: User, reviewer: User
) -> None:
    scene = waiting_scene(operator)
    request_changes(scene.request, reviewer, "Name ORD-12 in the commit message.")
    run = drive(scene)
    page = context.new_page()
    sign_in(page, live_server_asgi, operator.username)
    page.goto(f"{live_server_asgi.url}/runs/{run.pk}/result/")
    expect(page.locator("#result-outcome")).to_have_text("completed without publishing")
    sentence = page.locator("#outcome-sentence")
    expect(sentence).to_contain_text("requested changes were not taken up")
    assert "tone-ok" not in (page.locator("#result-outcome").get_attribute("class") or "")
    assert "tone-ok" not in (sentence.get_attribute("class") or "")
    expect(page.locator("#result-limitations")).to_contain_text("nothing was published")
    expect(page.locator("#requested-changes")).to_contain_text("Name ORD-12 in the commit message.")
    screenshot(page, f"told_ignored_changes_{size}")
    problems = serious_problems(page, "result of ignored changes", SIZES[size]["width"])
    assert not problems, "\n".join(problems)


def test_it_says_who_killed_a_run_and_why(
    live_server_asgi: AsgiServer, context: BrowserContext, size: str, operator: User, reviewer: User
) -> None:
    scene = waiting_scene(operator)
    kill(scene.run, operator, "wrong repository")
    run = drive(scene)
    page = context.new_page()
    sign_in(page, live_server_asgi, operator.username)
    page.goto(f"{live_server_asgi.url}/runs/{run.pk}/")
    expect(page.locator('[data-field="said"]')).to_contain_text(f"killed by {operator.username}: wrong repository")
    screenshot(page, f"told_kill_reason_{size}")
    problems = serious_problems(page, "killed run", SIZES[size]["width"])
    assert not problems, "\n".join(problems)


def test_it_shows_a_queued_run_queued_with_its_clocks_still(
    live_server_asgi: AsgiServer, context: BrowserContext, size: str, other_project: Project, other_member: User
) -> None:
    other_project.max_active_runs = 1
    other_project.save()
    first, queued = (create_run({**SMALL_CONTRACT, "task_id": f"q-{n}"}, SCRIPT, other_member, enqueue=False) for n in range(2))
    assert first.holds_slot and not queued.holds_slot
    page = context.new_page()
    sign_in(page, live_server_asgi, other_member.username)
    page.goto(f"{live_server_asgi.url}/runs/{queued.pk}/")
    expect(page.locator('[data-field="outcome"]')).to_have_text("queued")
    # Nothing of it runs: neither clock is marked to tick, and none shows time passing.
    expect(page.locator("[data-clock-ticks]")).to_have_count(0)
    working = page.locator('[data-field="working"]').text_content()
    screenshot(page, f"told_queued_{size}")
    problems = serious_problems(page, "queued run", SIZES[size]["width"])
    expect(page.locator('[data-field="working"]')).to_have_text(working or "")
    assert not problems, "\n".join(problems)
