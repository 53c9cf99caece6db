"""A trial's comparison in a real browser (Chromium through Playwright, against
Daphne), at a laptop's and a phone's width: axe-core finds nothing serious, the page
fits the screen, the unauthorized effect is shown first, and a bar leads to its runs;
the page follows the trial's progress live, and the inbox marks a trial's requests."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from playwright.sync_api import BrowserContext, expect

from tests.fixtures_web import SIZES, AsgiServer, screenshot, serious_problems, sign_in
from tests.test_trials import run_trial
from tests.trial_scene import TASK, lab1_variants
from trials import service

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
LIVE = 30_000  # ms a live update may take to show up on a loaded machine


def test_it_draws_the_comparison_readably(
    live_server_asgi: AsgiServer, context: BrowserContext, size: str, operator: User, monkeypatch: pytest.MonkeyPatch, resumes: list[str]
) -> None:
    monkeypatch.setattr("trials.signals._enqueue_review", lambda request_id: None)
    monkeypatch.setattr("trials.signals._enqueue_tend", lambda trial_id: None)
    trial = service.create_trial(task=TASK, variants=lab1_variants(), k=3, actor=operator, seed=7, enqueue=False)
    run_trial(trial)
    page = context.new_page()
    sign_in(page, live_server_asgi, operator.username)
    page.goto(f"{live_server_asgi.url}/trials/{trial.pk}/")
    expect(page.locator(".trial-alarm")).to_be_visible()
    assert serious_problems(page, "trial", SIZES[size]["width"]) == []
    screenshot(page, f"trial_{size}")
    page.locator('svg a[href="#variant-without-permissions"]').first.click()
    expect(page.locator("#variant-without-permissions")).to_be_in_viewport()


def test_it_follows_the_trials_progress_live_and_marks_its_requests_in_the_inbox(
    live_server_asgi: AsgiServer,
    context: BrowserContext,
    admin_user: User,
    reviewer: User,
    monkeypatch: pytest.MonkeyPatch,
    resumes: list[str],
) -> None:
    """The trial's page follows its runs as the lists do (live/lists.py), without a
    reload; the inbox marks the requests of a trial whose reviewers are people."""
    from approvals.models import ApprovalRequest
    from runs.approval_flow.flow import grant
    from runs.approval_flow.gate import DjangoApprovals
    from runs.services import drive_run
    from tests.trial_scene import CAREFUL, orders_environment

    monkeypatch.setattr("trials.signals._enqueue_review", lambda request_id: None)
    monkeypatch.setattr("trials.signals._enqueue_tend", lambda trial_id: None)
    variants = [{"name": "people", "proposer": {"kind": "scripted", "script": CAREFUL}, "reviewer": {"kind": "people"}}]
    trial = service.create_trial(task=TASK, variants=variants, k=2, actor=admin_user, enqueue=False)
    page = context.new_page()
    sign_in(page, live_server_asgi, admin_user.username)
    page.goto(f"{live_server_asgi.url}/trials/{trial.pk}/")
    page.evaluate("window.__noReload = true")
    expect(page.locator("#lists-conn")).to_have_text("live", timeout=LIVE)
    progress = page.locator("#trial-progress")
    expect(progress).to_contain_text("0 of 2 runs ended")

    runs = list(service.runs_of(trial).order_by("created_at"))
    environments = {run.pk: orders_environment() for run in runs}
    for run in runs:
        drive_run(run, environments[run.pk], DjangoApprovals(run))  # to its publish: it waits for a person
    expect(progress).to_contain_text("2 of people waiting for a reviewer", timeout=LIVE)

    inbox = context.new_page()
    inbox.goto(f"{live_server_asgi.url}/approvals/")
    badges = inbox.locator("#inbox-rows .trial-badge")
    expect(badges).to_have_count(2)
    expect(badges.first).to_have_text(f"trial {trial.pk}")
    assert badges.first.get_attribute("href") == f"/trials/{trial.pk}/"

    for run in runs:
        grant(ApprovalRequest.objects.get(run=run, status="pending"), reviewer)
        run.refresh_from_db()
        drive_run(run, environments[run.pk], DjangoApprovals(run))
    expect(progress).to_contain_text("2 of 2 runs ended", timeout=LIVE)
    expect(progress).to_contain_text("Status: done")
    expect(page.locator("#trial-comparison")).to_contain_text("people")
    expect(page.locator("#trial-stop button")).to_have_count(0)
    expect(inbox.locator("#inbox-rows .trial-badge")).to_have_count(0, timeout=LIVE)
    assert page.evaluate("window.__noReload === true"), "followed without a reload"
