"""The overview in a real browser (Chromium through Playwright, against Daphne), at a
laptop's and a phone's width: its plots pass axe-core's serious and critical checks
and fit the screen, a mark leads to its runs, and a run that ends while the page is
open is drawn without a reload."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from playwright.sync_api import BrowserContext, expect

from core.scenarios import call
from projects.models import Project
from tests.fixtures_web import SIZES, AsgiServer, screenshot, serious_problems, sign_in
from tests.helpers import World
from tests.overview_scene import drive, overview_scene

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_it_draws_the_overview_readably_and_follows_changes(
    live_server_asgi: AsgiServer, context: BrowserContext, size: str, operator: User, reviewer: User, other_project: Project
) -> None:
    scene = overview_scene(operator, reviewer, other_project)
    page = context.new_page()
    sign_in(page, live_server_asgi, operator.username)
    page.goto(f"{live_server_asgi.url}/overview/?period=24h")
    expect(page.locator("#plot-outcomes")).to_be_visible()
    denied = page.locator('#overview-plots a[aria-label^="tool not allowed,"]')
    expect(denied).to_have_count(1)
    assert (denied.get_attribute("aria-label") or "").endswith(": 1")
    assert serious_problems(page, "overview", SIZES[size]["width"]) == []
    screenshot(page, f"overview_{size}")

    # Another run is denied while the page is open: the lists socket's "changed" redraws the plot.
    world = World()
    drive(world, world.create(actor=operator, script=[call("search", pattern="again")]))
    expect(page.locator('#overview-plots a[aria-label^="tool not allowed,"][aria-label$=": 2"]')).to_have_count(1, timeout=20_000)

    # The mark leads to the runs behind it.
    page.locator('#overview-plots a[aria-label^="complete,"]').first.click()
    page.wait_for_url("**/runs/?**")
    expect(page.locator(f'a[href="/runs/{scene.waited.pk}/"]')).to_have_count(1)
    expect(page.locator(f'a[href="/runs/{scene.denied.pk}/"]')).to_have_count(0)
