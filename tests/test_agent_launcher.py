"""The agent launch's parts that need no container (runs.agents.launch): which presets a
run may name, what the agent is asked, its container's limits, the token a worker lets
go of, and the proposer's stops (a spent budget, an agent that never started)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
import redis
from django.conf import settings
from django.test import override_settings

from core.errors import InputError
from core.ports import ProposerStopped
from runs.agents import tokens
from runs.agents.bridge import Bridge, prefix
from runs.agents.launch import PREAMBLE, RESUMED, agent_spec, prompt
from runs.agents.proposer import PRESETS, AgentProposer, startable
from runs.models import AgentToken
from runs.proposers import check_proposer_config
from sandbox.public import AGENT_SPEC
from sandbox.public import PRESETS as SANDBOX_PRESETS
from tests.helpers import World
from tests.runs_waiting import DEMO_CONTRACT


@pytest.fixture
def bridge() -> Iterator[Bridge]:
    run_id = str(uuid.uuid4())
    client = redis.Redis.from_url(settings.REDIS_URL)
    yield Bridge(run_id, client)
    keys = list(client.scan_iter(match=prefix(run_id) + "*"))
    if keys:
        client.delete(*keys)


def test_it_names_the_any_agent_alike_and_offers_it_only_with_the_admins_command() -> None:
    assert set(SANDBOX_PRESETS) == set(PRESETS) - {"mcp-client"}
    assert all(startable(p) for p in ("mcp-client", "claude-code", "codex", "gemini-cli"))
    with override_settings(HARNESS_AGENT_ANY_COMMAND=[]):
        assert not startable("any")
        with pytest.raises(InputError, match="HARNESS_AGENT_ANY_COMMAND"):
            check_proposer_config({"kind": "agent", "preset": "any"})
    with override_settings(HARNESS_AGENT_ANY_COMMAND=["python3", "-m", "my_agent"]):
        assert startable("any")
        assert check_proposer_config({"kind": "agent", "preset": "any", "model": "m"}) == {"kind": "agent", "preset": "any", "model": "m"}
    with pytest.raises(InputError, match="one of mcp-client, claude-code, codex, gemini-cli, any"):
        check_proposer_config({"kind": "agent", "preset": "custom"})


def test_it_asks_the_agent_for_the_objective_through_the_harness_tools() -> None:
    said = prompt(DEMO_CONTRACT, resumed=False)
    assert said.startswith(PREAMBLE) and "`finish`" in said
    assert DEMO_CONTRACT["objective"] in said and "orders/*" in said
    assert all(c in said for c in DEMO_CONTRACT["acceptance_criteria"])
    assert RESUMED not in said and RESUMED in prompt(DEMO_CONTRACT, resumed=True)


@pytest.mark.django_db
def test_it_gives_the_agent_the_policys_limits_but_never_less_than_node_needs() -> None:
    run = World().create()
    spec = agent_spec(run, "harness-agent:test")
    assert spec.image == "harness-agent:test"
    assert spec.memory == AGENT_SPEC.memory  # the default policy's 512m is less than 1g
    assert spec.pids_limit >= AGENT_SPEC.pids_limit and spec.network == "none"


@pytest.mark.django_db
def test_it_revokes_only_the_token_the_worker_held() -> None:
    run = World().create()
    old = tokens.mint(run)
    new = tokens.mint(run)  # a worker that took the run over
    tokens.revoke(run.pk, old)
    assert tokens.authenticate(new, run.pk, where="mcp") == run
    tokens.revoke(run.pk, new)
    assert not AgentToken.objects.filter(run=run, revoked_at__isnull=True).exists()


class Failed:
    def ended(self) -> str | None:
        return "the agent could not start: image harness-agent:nope not found"

    def failure(self) -> str | None:
        return self.ended()

    def stop(self) -> None:
        pass


def test_it_stops_the_run_when_its_budget_is_spent_or_its_agent_never_started(bridge: Bridge) -> None:
    spent = AgentProposer(
        bridge.run_id, preset="claude-code", tools=[], snapshot={}, bridge=bridge, budget=lambda: "the run's token budget is spent"
    )
    with pytest.raises(ProposerStopped) as stopped:
        spent.propose(None)
    assert stopped.value.reason == "budget_exhausted" and "token budget" in stopped.value.message
    never = AgentProposer(bridge.run_id, preset="claude-code", tools=[], snapshot={}, bridge=bridge, agent=Failed(), budget=lambda: None)
    with pytest.raises(ProposerStopped) as failed:
        never.propose(None)
    assert failed.value.reason == "model_error" and "could not start" in failed.value.message
