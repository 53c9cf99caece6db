"""An outside agent's run shown like any other (issue 41): the run page, the result
and the approval request name the agent and its version from its ``agent_started``
event ("Codex 0.171.0", its preset beside), the trace says each call is the agent's,
its model calls through the proxy count in the budget bar, the result's cost, the
report, the runs list and the overview; what the agent wrote is escaped and never
hides anything; only the run's project sees it."""

from __future__ import annotations

import json
import re

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse
from pytest_django import Settings
from rest_framework.test import APIClient

from api.models import ApiToken
from runs.services import report_of
from tests.agent_scene import PRICES, agent_completed, agent_waiting
from tests.fixtures_web import waiting_scene

pytestmark = [pytest.mark.django_db]

# 1200 + 300 and 800 + 200 tokens through the proxy, at gpt-test's price.
TOKENS = 2500
COST = round((2000 * 1.25 + 500 * 10.0) / 1_000_000, 8)


@pytest.fixture(autouse=True)
def priced(settings: Settings) -> None:
    settings.HARNESS_MODEL_PRICES = json.dumps(PRICES)


def signed_in(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_it_names_the_agent_on_the_run_page_and_each_of_its_calls_in_the_trace(operator: User) -> None:
    scene = agent_waiting(operator)
    page = signed_in(operator).get(reverse("runs:detail", args=[scene.run.pk])).content.decode()
    assert (
        'Proposed by <strong data-field="agent">Codex 0.171.0</strong> <code title="the agent\'s preset">codex</code>, an outside agent'
        ' Harness started in the run\'s container from <code class="agent-image">harness-agent:codex-0f3a</code>'
    ) in page
    assert "its model <code>gpt-test</code>, called through Harness's model proxy" in page
    # Each proposal so far (read, write, check, publish) is said to be the agent's.
    assert page.count("Proposed by Codex") == 4
    assert "Agent started: Codex 0.171.0" in page
    # Its model requests through the proxy, in words, and the one it refused.
    assert "Model request 1 (model proxy)" in page and "gpt-test (openai responses): 1200 in + 300 out tokens, $0.0045" in page
    assert "Model request refused" in page and "by the model proxy" in page and "the run did not choose the model gpt-other" in page
    # The budget bar counts the proxy's calls, as a model run's.
    tokens = re.search(r'data-budget="tokens" data-limit="(\d+)"', page)
    assert tokens is not None and int(tokens.group(1)) > 0
    assert f"{TOKENS} / {tokens.group(1)}" in page
    summary = signed_in(operator).get(reverse("runs:summary", args=[scene.run.pk])).json()
    assert summary["agent"]["said"] == "Codex 0.171.0" and summary["agent"]["preset"] == "codex"
    assert {b["name"]: b["used"] for b in summary["budgets"]}["tokens"] == TOKENS


def test_it_says_which_agent_asked_on_the_approval_page(operator: User, reviewer: User) -> None:
    scene = agent_waiting(operator)
    page = signed_in(reviewer).get(reverse("approvals:detail", args=[scene.request.pk])).content.decode()
    said = re.sub(r"\s+", " ", page.split('id="run-agent">', 1)[1].split("</p>", 1)[0])
    assert said.startswith('Asked by <strong data-field="agent">Codex 0.171.0</strong>'), said
    assert ", an outside agent" in said
    assert f', in run <a href="{reverse("runs:detail", args=[scene.run.pk])}">calc-fix</a>' in said


def test_it_says_harness_own_loop_asked_for_a_run_without_an_agent(operator: User, reviewer: User) -> None:
    scene = waiting_scene(operator)
    page = signed_in(reviewer).get(reverse("approvals:detail", args=[scene.request.pk])).content.decode()
    assert "Asked by <strong>Harness's own loop</strong> <code>scripted</code>, in run" in page
    assert "an outside agent" not in page


def test_it_names_the_agent_and_counts_its_model_calls_on_the_result_and_in_the_report(operator: User, reviewer: User) -> None:
    scene = agent_completed(operator, reviewer)
    page = signed_in(operator).get(reverse("runs:result", args=[scene.run.pk])).content.decode()
    assert 'Proposed by <strong data-field="agent">Codex 0.171.0</strong>' in page
    assert "the agent exited with status 0" in page
    assert re.search(rf'data-budget="tokens"><span>tokens</span><span>{TOKENS} of \d+</span>', page)
    assert re.search(rf'data-budget="cost"><span>cost</span><span>{round(COST, 4)} USD of [\d.]+ USD</span>', page)
    assert "<span>model requests</span><span>2 through the model proxy</span>" in page
    assert "1 refused by Harness (model or budget), 0 failed at the provider" in page

    report = report_of(scene.run)
    proposer = report["proposer"]
    assert (
        proposer["kind"] == "agent"
        and proposer["agent"]["said"] == "Codex 0.171.0"
        and proposer["agent"]["ended"] == "exited with status 0"
    )
    usage = proposer["model_usage"]
    assert (usage["requests"], usage["tokens"], usage["cost_usd"], usage["refused"], usage["failed"]) == (2, TOKENS, COST, 1, 0)
    assert usage["max_tokens"] is not None
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Token {ApiToken.issue(operator)[1]}")
    assert api.get(f"/api/runs/{scene.run.pk}/report/").json()["proposer"] == json.loads(json.dumps(proposer))
    download = json.loads(signed_in(operator).get(reverse("runs:report", args=[scene.run.pk])).content)
    assert download["proposer"]["agent"]["version"] == "0.171.0"


def test_it_names_the_agent_in_the_runs_list_and_counts_its_cost_on_the_overview(operator: User, reviewer: User) -> None:
    agent_completed(operator, reviewer)
    runs = signed_in(operator).get(reverse("runs:list")).content.decode()
    assert """<div class="faint run-agent" title="an outside agent proposes this run's calls">Codex 0.171.0</div>""" in runs
    overview = signed_in(operator).get(reverse("overview")).content.decode()
    assert f"Model cost per model (${COST:.4f})" in overview
    assert "gpt-test" in overview


def test_it_marks_hidden_characters_of_what_the_agent_said(operator: User) -> None:
    scene = agent_waiting(operator, version="0.171.0", image="harness-agent:\u202ecodex\u200b<b>x</b>")
    page = signed_in(operator).get(reverse("runs:detail", args=[scene.run.pk])).content.decode()
    assert "\u202e" not in page and "\u200b" not in page
    assert "⟨U+202E⟩" in page and "⟨U+200B⟩" in page
    assert "<b>x</b>" not in page and "&lt;b&gt;x&lt;/b&gt;" in page


def test_it_shows_an_agents_run_only_to_its_projects_members(operator: User, other_member: User) -> None:
    scene = agent_waiting(operator)
    client = signed_in(other_member)
    for url in (
        reverse("runs:detail", args=[scene.run.pk]),
        reverse("runs:result", args=[scene.run.pk]),
        reverse("approvals:detail", args=[scene.request.pk]),
    ):
        assert client.get(url).status_code in (403, 404), url
    assert "Codex" not in client.get(reverse("runs:list")).content.decode()
