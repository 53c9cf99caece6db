"""An outside agent's run in a real browser (Chromium through Playwright, against
Daphne), at a laptop's and a phone's width, axe-clean: the New run form offers the
agent only once the proposer "agent" is chosen, starts an MCP client's run and shows
its URL and token once, with copy buttons; the run page then names no token, and an
agent's run page names the agent and its version."""

from __future__ import annotations

import json

import pytest
from django.contrib.auth.models import User
from playwright.sync_api import BrowserContext, expect
from pytest_django import Settings

from runs.agents import tokens
from runs.models import AgentToken, Run
from tests.agent_scene import PRICES, agent_waiting
from tests.fixtures_web import SIZES, AsgiServer, screenshot, serious_problems, sign_in

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_it_starts_an_mcp_clients_run_from_the_form_and_shows_its_token_once(
    live_server_asgi: AsgiServer, context: BrowserContext, size: str, operator: User
) -> None:
    width = SIZES[size]["width"]
    page = context.new_page()
    sign_in(page, live_server_asgi, operator.username)
    page.goto(f"{live_server_asgi.url}/runs/new/")
    # Harness's own loop first: no agent to choose, no model for a script.
    expect(page.locator("#agent-preset-field")).to_be_hidden()
    expect(page.locator("#model-field")).to_be_hidden()
    page.select_option("#id_template", "demo")
    page.select_option("#id_proposer_kind", "agent")
    expect(page.locator("#agent-preset-field")).to_be_visible()
    page.select_option("#id_agent_preset", "mcp-client")
    page.fill("#id_model", "gpt-test")
    page.locator("#id_model").scroll_into_view_if_needed()
    assert serious_problems(page, "new run, an outside agent", width) == []
    screenshot(page, f"new_run_agent_{size}")

    page.get_by_role("button", name="Start run").click()
    expect(page.locator("#agent-connection")).to_be_visible()
    run = Run.objects.get()
    token = page.locator("#mcp-token").input_value()
    assert token.startswith(tokens.PREFIX) and isinstance(tokens.authenticate(token, run.pk, where="mcp"), Run)
    expect(page.locator("#mcp-url")).to_have_value(f"http://localhost:8000/agent/runs/{run.pk}/mcp/")
    expect(page.locator("#token-once")).to_contain_text("it is shown once")
    page.get_by_role("button", name="Copy the token").click()
    expect(page.locator("#copy-said")).not_to_be_empty()
    assert serious_problems(page, "connect your MCP client", width) == []
    screenshot(page, f"agent_connect_{size}")

    page.get_by_role("link", name="Go to the run").click()
    page.wait_for_url(f"**/runs/{run.pk}/")
    expect(page.locator("#run-agent")).to_contain_text("Proposed by an MCP client")
    assert token not in page.content()
    assert AgentToken.objects.filter(run=run).count() == 1


def test_it_names_the_agent_and_its_version_on_its_run_page(
    live_server_asgi: AsgiServer, context: BrowserContext, size: str, operator: User, settings: Settings
) -> None:
    settings.HARNESS_MODEL_PRICES = json.dumps(PRICES)
    scene = agent_waiting(operator, preset="claude-code", version="2.1.197", image="harness-agent:claude-code-5c1e")
    page = context.new_page()
    sign_in(page, live_server_asgi, operator.username)
    page.goto(f"{live_server_asgi.url}/runs/{scene.run.pk}/")
    agent = page.locator("#run-agent")
    expect(agent).to_contain_text("Proposed by Claude Code 2.1.197 claude-code, an outside agent")
    expect(page.locator(".trace").get_by_text("Proposed by Claude Code").first).to_be_visible()
    expect(page.locator('[data-budget="tokens"] [data-part="text"]')).to_contain_text("2500 /")
    assert serious_problems(page, "an agent's run", SIZES[size]["width"]) == []
    screenshot(page, f"run_agent_{size}")
