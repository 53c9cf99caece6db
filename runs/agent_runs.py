"""An outside agent's run as pages, the API and the report tell it (issue 41): which
agent ran it (its preset, and the version and image its ``agent_started`` event
recorded), what its model calls through the proxy used against the run's budget
(runs.agents.usage), and, for the ``mcp-client`` preset, what its creator is handed
once to connect a client (the run's MCP URL and a token minted for it)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db import transaction

from core import events as ev
from core.jsonutil import JSON
from runs.agents import usage
from runs.agents.names import agent_name, agent_words
from runs.control import ACTIVE
from runs.models import Event, Run

# The preset whose agent Harness does not start: whoever created the run connects one.
CONNECTED = "mcp-client"
REFUSALS = ("refused", "budget_exhausted")


@dataclass(frozen=True)
class Agent:
    """The outside agent of a run: ``version`` and ``image`` once it started (empty
    before, and always for a client that connects itself), ``ended`` how it ended."""

    preset: str
    model: str
    version: str = ""
    image: str = ""
    ended: str = ""

    @property
    def name(self) -> str:
        return agent_name(self.preset)

    @property
    def words(self) -> str:
        return agent_words(self.preset, self.version)

    @property
    def started_by_harness(self) -> bool:
        return self.preset != CONNECTED

    def as_json(self) -> dict[str, JSON]:
        return {
            "preset": self.preset,
            "name": self.name,
            "version": self.version or None,
            "image": self.image or None,
            "model": self.model or None,
            "ended": self.ended or None,
            "said": self.words,
        }


def is_agent_run(run: Run) -> bool:
    return isinstance(run.proposer, dict) and run.proposer.get("kind") == "agent"


def _ended_words(e: ev.AgentEnded) -> str:
    said = {"exited": f"exited with status {e.exit_code}", "killed": "was killed", "deadline": "was stopped at the deadline"}
    return said.get(e.reason, e.problem or "could not run")


def agent_of(run: Run) -> Agent | None:
    """The run's outside agent, or None for a run Harness's own loop proposed."""
    if not is_agent_run(run):
        return None
    config = run.proposer
    preset, model = str(config.get("preset") or ""), str(config.get("model") or "")
    kinds = (ev.type_name(ev.AgentStarted), ev.type_name(ev.AgentEnded))
    version = image = ended = ""
    for row in Event.objects.filter(run_id=run.pk, type__in=kinds).order_by("-seq")[:2]:
        typed = row.typed()
        if isinstance(typed, ev.AgentStarted) and not version:
            version, image, preset = typed.version, typed.image, typed.preset or preset
        elif isinstance(typed, ev.AgentEnded) and not ended and not version:
            ended = _ended_words(typed)
    return Agent(preset=preset, model=model, version=version, image=image, ended=ended)


def agent_usage(run: Run) -> dict[str, JSON]:
    """What the agent's model calls used through the proxy against the run's budget, in
    the shape of a built-in model run's usage (runs.proposers.proposer_usage). An ended
    run's budget is the one its last call was admitted under (what is left of a
    project's budget moves on after the run)."""
    used = usage.totals(run.pk)
    notes = Event.objects.filter(run_id=run.pk, type=usage.NOTE, payload__detail__via=usage.VIA)
    row = notes.filter(payload__kind="usage").order_by("-seq").first()
    newest = row.typed() if row is not None else None
    detail = newest.detail if isinstance(newest, ev.ModelNote) else None
    if run.status not in ACTIVE and isinstance(detail, dict) and "max_tokens" in detail:
        max_tokens, max_cost = detail.get("max_tokens"), detail.get("max_cost_usd")
    else:
        budget = usage.run_budget(run)
        max_tokens, max_cost = budget.max_tokens, budget.max_cost_usd
    config = run.proposer if isinstance(run.proposer, dict) else {}
    return {
        "model": config.get("model") or (detail.get("model") if isinstance(detail, dict) else None),
        "provider": usage.VIA,
        "requests": used.requests,
        "input_tokens": used.input_tokens,
        "output_tokens": used.output_tokens,
        "tokens": used.tokens,
        "cost_usd": round(used.cost_usd, 8),
        "estimated": notes.filter(payload__kind="usage", payload__detail__estimated=True).exists(),
        "max_tokens": max_tokens,
        "max_cost_usd": max_cost,
        # Requests the proxy refused (a model the run did not choose, a spent budget) or the provider failed.
        "refused": notes.filter(payload__kind__in=REFUSALS).count(),
        "failed": notes.filter(payload__kind="error").count(),
    }


def run_usage(run: Run, snapshot: dict[str, Any]) -> dict[str, JSON] | None:
    """The run's model usage whoever made the calls: Harness's own model loop (its
    snapshot) or an outside agent (the proxy's notes); None for a scripted run."""
    if is_agent_run(run):
        return agent_usage(run)
    from runs.proposers import proposer_usage

    return proposer_usage(run.proposer if isinstance(run.proposer, dict) else {}, snapshot)


def proposer_report(run: Run, snapshot: dict[str, Any]) -> dict[str, JSON]:
    """Who proposed the run's calls, for the report: the proposer's kind and model,
    the outside agent named (or null), and its model usage."""
    config = run.proposer if isinstance(run.proposer, dict) else {}
    agent = agent_of(run)
    return {
        "kind": str(config.get("kind", "")),
        "model": config.get("model"),
        "agent": agent.as_json() if agent is not None else None,
        "model_usage": run_usage(run, snapshot),
    }


@dataclass(frozen=True)
class Connection:
    """What an ``mcp-client`` run's creator is handed, once: never stored (only the
    token's digest is: runs.agents.tokens), never shown again."""

    run_id: str
    mcp_url: str
    token: str
    model_proxy: dict[str, str]

    def as_json(self) -> dict[str, JSON]:
        return {
            "mcp_url": self.mcp_url,
            "token": self.token,
            "model_proxy": dict(self.model_proxy),
            "note": NOTE,
        }


NOTE = (
    "Shown once: Harness keeps only the token's digest. It works only while the run is active (running or waiting for a"
    " reviewer): it opens this run's MCP endpoint and model proxy and nothing else, and is refused once the run ends."
)


def agent_base(run_id: str) -> str:
    return f"{settings.HARNESS_PUBLIC_URL}/agent/runs/{run_id}"


def connection(run: Run) -> Connection | None:
    """For a run whose agent its creator connects (``mcp-client``): a new token and
    where to use it. Any token minted before stops working (one agent per run)."""
    if not is_agent_run(run) or run.proposer.get("preset") != CONNECTED:
        return None
    from runs.agents.tokens import mint

    base = agent_base(str(run.pk))
    return Connection(
        run_id=str(run.pk),
        mcp_url=f"{base}/mcp/",
        token=mint(run),
        model_proxy={"anthropic": f"{base}/anthropic", "openai": f"{base}/openai/v1", "gemini": f"{base}/gemini"},
    )


def start_run(contract: object, proposer: object, actor: Any, *, project: str | None = None) -> tuple[Run, Connection | None]:
    """Create a run (runs.runtime.create_run) and, for an ``mcp-client`` agent, mint
    its token in the same transaction: a run that is not created has no token."""
    from runs.runtime import create_run

    with transaction.atomic():
        run = create_run(contract, proposer, actor, project=project)
        return run, connection(run)
