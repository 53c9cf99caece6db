"""The trace filtered in a real browser at a laptop's and a phone's width: by outcome,
tool and event type, kept in the URL; "jump to the first failure"; a call's arguments
shown once, a later call with the same tool and arguments collapsed; axe clean."""

from __future__ import annotations

import re

import pytest
from django.contrib.auth.models import User
from playwright.sync_api import BrowserContext, expect

from core.scenarios import FIXED, call
from tests.fixtures_web import SIZES, AsgiServer, screenshot, serious_problems, sign_in, waiting_scene

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

# The check fails before the fix and passes after; the file is read twice alike.
SCRIPT = [
    call("read_file", path="src/calc.py"),
    call("run_check", check_id="tests"),
    call("read_file", path="src/calc.py"),
    call("write_file", path="src/calc.py", content=FIXED),
    call("run_check", check_id="tests"),
    call("publish", message="reject negative quantities"),
    call("finish", summary="fixed"),
]


def test_it_filters_the_trace_in_the_url_and_jumps_to_the_failure(
    live_server_asgi: AsgiServer, context: BrowserContext, size: str, operator: User
) -> None:
    scene = waiting_scene(operator, SCRIPT)
    page = context.new_page()
    sign_in(page, live_server_asgi, operator.username)
    page.goto(f"{live_server_asgi.url}/runs/{scene.run.pk}/?outcome=bad")
    expect(page.locator("#conn")).to_have_text("live", timeout=30_000)
    expect(page.locator("#trace-filters select[name=outcome]")).to_have_value("bad")
    visible = page.locator("#timeline li.step:visible")
    expect(visible.first).to_be_visible()
    assert all("tone-bad" in (c or "") for c in visible.evaluate_all("nodes => nodes.map(n => n.className)"))
    expect(page.locator("#trace-count")).to_contain_text(re.compile(r"showing \d+ of \d+ loaded events"))
    screenshot(page, f"trace_filtered_{size}")
    problems = serious_problems(page, "filtered trace", SIZES[size]["width"])

    page.select_option("#trace-filters select[name=outcome]", "")
    page.select_option("#trace-filters select[name=tool]", "read_file")
    expect(page).to_have_url(re.compile(r"\?tool=read_file$"))
    expect(page.locator("#timeline li.card:visible")).to_have_count(2)
    second = page.locator("#timeline li.card:visible").nth(1).locator("details.card-args")
    expect(second).not_to_have_attribute("open", "")
    expect(second.locator("summary")).to_have_text("Arguments (the same as c1)")
    expect(page.locator("#timeline li.card:visible").first.locator("details.card-args")).to_have_attribute("open", "")

    page.select_option("#trace-filters select[name=type]", "run_started")
    expect(page.locator("#timeline li.step:visible")).to_have_count(0)
    page.click("#jump-failure")
    expect(page).to_have_url(re.compile(rf"/runs/{scene.run.pk}/$"))
    focused = page.locator("#timeline li.step.tone-bad summary:focus")
    expect(focused).to_be_in_viewport()
    assert not problems, "\n".join(problems)
