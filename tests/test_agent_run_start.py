"""Starting an outside agent's run (issue 41), as any run is started: the New run form
and the API name the agent (its preset and model) beside Harness's own loop, every
problem named by its field; an ``mcp-client`` run's creator is handed the run's MCP
URL and token once, in the answer to the creation, and never again (not on a page,
not in an event, not in the API)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.conf import settings
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse
from rest_framework.test import APIClient

from api.models import ApiToken
from projects.models import AuditEntry
from runs.agent_runs import agent_of, agent_usage
from runs.agents import proposer as agent_proposer
from runs.agents import tokens
from runs.agents.proposer import PRESETS
from runs.models import AgentToken, Event, Run
from tests.helpers import STARTABLE

pytestmark = [pytest.mark.django_db]

CONTAINER_PRESETS = [preset for preset in PRESETS if preset != "mcp-client"]


def signed_in(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


def api(user: User) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {ApiToken.issue(user)[1]}")
    return client


@pytest.fixture
def launchers(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every preset startable, as once the agent's container is built (its launcher is not
    this file's subject: no run here is driven)."""
    for preset in CONTAINER_PRESETS:
        monkeypatch.setitem(agent_proposer.LAUNCHERS, preset, lambda launch: None)


def form(**fields: str) -> dict[str, str]:
    return {"template": "demo", "contract": "", "proposer_kind": "agent", "proposer_options": "", **fields}


def test_it_offers_harness_own_loop_and_every_outside_agent(operator: User) -> None:
    page = signed_in(operator).get(reverse("runs:new")).content.decode()
    for said in (
        "Harness&#x27;s own loop: a fixed script (scripted)",
        "An outside agent, chosen below (agent)",
        "Claude Code (started by Harness in the run&#x27;s container)<",
        "The admin&#x27;s custom agent (its image and command): not available on this server<",
        "Any MCP client (you connect it; Harness starts nothing)",
        'id="id_agent_preset"',
        'id="id_model"',
    ):
        assert said in page, said
    for preset in PRESETS:
        assert f'<option value="{preset}"' in page, preset


@pytest.mark.parametrize(
    ("fields", "said"),
    [
        ({}, "Outside agent</span> · required: one of mcp-client, claude-code, codex, gemini-cli, any"),
        (
            {"agent_preset": "any"},
            "Outside agent</span> · the server has no command for the &#x27;any&#x27; agent (HARNESS_AGENT_ANY_COMMAND)",
        ),
        ({"agent_preset": "mcp-client", "model": "two words"}, "Model</span> · a model name (no spaces, at most 200 characters)"),
        (
            {"agent_preset": "codex", "proposer_kind": "scripted"},
            "Outside agent</span> · an outside agent is chosen with the proposer &#x27;agent&#x27;",
        ),
        (
            {"agent_preset": "mcp-client", "proposer_options": '{"script": []}'},
            "Proposer options (JSON object)</span> · script: unexpected field",
        ),
        # The run's own budget, refused in a model run's words.
        (
            {"agent_preset": "mcp-client", "proposer_options": '{"max_tokens": 0}'},
            "Proposer options (JSON object)</span> · max_tokens: must be a positive integer (tokens for the whole run)",
        ),
        (
            {"agent_preset": "mcp-client", "proposer_options": '{"max_cost_usd": "5"}'},
            "Proposer options (JSON object)</span> · max_cost_usd: must be a positive number (US dollars for the whole run)",
        ),
    ],
)
def test_it_names_each_problem_of_the_agent_by_its_field(operator: User, fields: dict[str, str], said: str) -> None:
    response = signed_in(operator).post(reverse("runs:new"), form(**fields))
    page = response.content.decode()
    assert response.status_code == 400, page
    assert said in page
    assert "proposer.preset" not in page
    assert not Run.objects.exists()


@pytest.mark.parametrize("preset", CONTAINER_PRESETS)
def test_it_starts_an_agent_harness_runs_from_the_form_and_hands_out_no_token(operator: User, launchers: None, preset: str) -> None:
    response = signed_in(operator).post(reverse("runs:new"), form(agent_preset=preset, model="claude-test"))
    run = Run.objects.get()
    assert response.status_code == 302 and response["Location"] == reverse("runs:detail", args=[run.pk])
    assert run.proposer == {"kind": "agent", "preset": preset, "model": "claude-test"}
    # Its launcher mints the container's token when the worker starts it: none is made here.
    assert not AgentToken.objects.filter(run=run).exists()
    agent = agent_of(run)
    assert agent is not None and agent.preset == preset and agent.version == ""


def test_it_gives_an_agent_run_its_own_model_budget_from_the_form_and_the_api(operator: User, launchers: None) -> None:
    options = '{"max_tokens": 20000, "max_cost_usd": 0.5}'
    response = signed_in(operator).post(reverse("runs:new"), form(agent_preset="codex", model="gpt-test", proposer_options=options))
    assert response.status_code == 302, response.content.decode()
    formed = Run.objects.get()
    assert formed.proposer == {"kind": "agent", "preset": "codex", "model": "gpt-test", "max_tokens": 20000, "max_cost_usd": 0.5}
    proposer = {"kind": "agent", "preset": "mcp-client", "max_tokens": 300}
    created = api(operator).post("/api/runs/", {"contract": STARTABLE, "proposer": proposer}, format="json")
    assert created.status_code == 201, created.json()
    run = Run.objects.get(pk=created.json()["id"])
    assert run.proposer == proposer
    # What the run's pages and report tell of its budget: its own, under the server's.
    used = agent_usage(run)
    assert (used["max_tokens"], used["max_cost_usd"]) == (300, settings.HARNESS_MODEL_MAX_COST_USD)


def test_it_shows_an_mcp_clients_url_and_token_once_and_never_again(operator: User) -> None:
    client = signed_in(operator)
    response = client.post(reverse("runs:new"), form(agent_preset="mcp-client", model="claude-test"))
    page = response.content.decode()
    run = Run.objects.get()
    assert response.status_code == 201, page
    assert "no-store" in response["Cache-Control"]
    assert run.proposer == {"kind": "agent", "preset": "mcp-client", "model": "claude-test"}
    url = f"http://localhost:8000/agent/runs/{run.pk}/mcp/"
    [token] = [word for word in page.replace('"', " ").split() if word.startswith(tokens.PREFIX)][:1]
    assert tokens.authenticate(token, run.pk, where="mcp") == run
    for said in (
        url,
        "Copy the token now: it is shown once.",
        "It works only while the run is active",
        'data-copy="mcp-token"',
        f'"Authorization": "Bearer {token}"',
        f"http://localhost:8000/agent/runs/{run.pk}/openai/v1",
    ):
        assert said in page, said
    # Only its digest is kept; nothing else of the site has it.
    assert not AgentToken.objects.filter(digest=token).exists()
    later = [
        client.get(reverse("runs:detail", args=[run.pk])),
        client.get(reverse("runs:summary", args=[run.pk])),
        client.get(reverse("runs:list")),
        client.get(reverse("runs:report", args=[run.pk])),
        client.get(reverse("runs:new")),
    ]
    for answer in later:
        assert answer.status_code == 200 and token not in answer.content.decode()
    assert "Proposed by <strong" in later[0].content.decode()
    assert not any(token in json.dumps(payload) for payload in Event.objects.values_list("payload", flat=True))
    assert token not in json.dumps(list(AuditEntry.objects.values_list("detail", flat=True)), default=str)
    run.refresh_from_db()
    assert token not in json.dumps([run.proposer, run.state, run.contract])


def test_it_answers_the_api_with_the_connection_in_the_creation_only(operator: User, launchers: None) -> None:
    client = api(operator)
    created = client.post("/api/runs/", {"contract": STARTABLE, "proposer": {"kind": "agent", "preset": "mcp-client"}}, format="json")
    body: dict[str, Any] = created.json()
    assert created.status_code == 201, body
    assert created["Cache-Control"] == "no-store"
    connection = body["agent_connection"]
    assert connection["mcp_url"] == f"http://localhost:8000/agent/runs/{body['id']}/mcp/"
    assert connection["model_proxy"]["anthropic"] == f"http://localhost:8000/agent/runs/{body['id']}/anthropic"
    assert "works only while the run is active" in connection["note"]
    token = connection["token"]
    assert isinstance(tokens.authenticate(token, body["id"], where="mcp"), Run)
    assert body["agent"] == {
        "preset": "mcp-client",
        "name": "an MCP client",
        "version": None,
        "image": None,
        "model": None,
        "ended": None,
        "said": "an MCP client",
    }
    for later in (client.get(f"/api/runs/{body['id']}/"), client.get("/api/runs/"), client.get(f"/api/runs/{body['id']}/events/")):
        assert later.status_code == 200 and token not in later.content.decode() and "agent_connection" not in later.json()

    other = client.post(
        "/api/runs/", {"contract": STARTABLE, "proposer": {"kind": "agent", "preset": "codex", "model": "gpt-test"}}, format="json"
    )
    assert other.status_code == 201 and other.json()["agent_connection"] is None
    assert other.json()["agent"]["name"] == "Codex" and other.json()["proposer"] == {
        "kind": "agent",
        "preset": "codex",
        "model": "gpt-test",
    }
    assert "Cache-Control" not in other or "no-store" not in other["Cache-Control"]
    assert not AgentToken.objects.filter(run_id=other.json()["id"]).exists()


@pytest.mark.parametrize(
    ("proposer", "field", "said"),
    [
        ({"kind": "agent"}, "proposer.preset", "required: one of mcp-client, claude-code, codex, gemini-cli, any"),
        (
            {"kind": "agent", "preset": "any"},
            "proposer.preset",
            "the server has no command for the 'any' agent (HARNESS_AGENT_ANY_COMMAND)",
        ),
        ({"kind": "agent", "preset": "mcp-client", "model": ""}, "proposer.model", "a model name"),
        ({"kind": "agent", "preset": "mcp-client", "api_key": "sk-x"}, "proposer.api_key", "unexpected field"),
        ({"kind": "agent", "preset": "mcp-client", "max_tokens": 1.5}, "proposer.max_tokens", "must be a positive integer"),
        ({"kind": "agent", "preset": "mcp-client", "max_cost_usd": -1}, "proposer.max_cost_usd", "must be a positive number"),
    ],
)
def test_it_names_each_problem_of_the_agent_in_the_api(operator: User, proposer: dict[str, Any], field: str, said: str) -> None:
    refused = api(operator).post("/api/runs/", {"contract": STARTABLE, "proposer": proposer}, format="json")
    assert refused.status_code == 400
    assert any(said in message for message in refused.json()[field]), refused.json()
    assert not Run.objects.exists() and not AgentToken.objects.exists()
