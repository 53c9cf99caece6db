"""A trial's comparison in a real browser (Chromium through Playwright, against
Daphne), at a laptop's and a phone's width: axe-core finds nothing serious, the page
fits the screen, the unauthorized effect is shown first, and a bar leads to its runs."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from playwright.sync_api import BrowserContext, expect

from tests.fixtures_web import SIZES, AsgiServer, screenshot, serious_problems, sign_in
from tests.test_trials import run_trial
from tests.trial_scene import TASK, lab1_variants
from trials import service

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


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
