"""Building a run's proposer from its stored configuration and snapshot.

Kinds: ``scripted`` (a fixed list of proposals), ``openai`` (Chat Completions, any
OpenAI-compatible server on an allowed base URL), ``anthropic`` (Messages API) and
``agent`` (an outside agent whose MCP calls are the proposals: runs.agents.proposer).
A model run's configuration names the model and may ask for a smaller budget than the
server's; it never carries credentials: API keys come from settings only."""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from django.conf import settings

from common.redact import redact
from core.contract import Contract
from core.decisions import Refuse
from core.environment import RepositoryContext
from core.errors import FieldProblem, InputError
from core.jsonutil import JSON
from core.ports import Clock, Controls, Proposer, ProposerStopped
from core.proposals import parse
from core.scripted import ScriptedProposer
from core.tools import ToolSpec

if TYPE_CHECKING:
    from adapters.pricing import Budget

log = logging.getLogger(__name__)

PROPOSER_KINDS = ("scripted", "openai", "anthropic", "agent")
MODEL_KINDS = ("openai", "anthropic")
MODEL_FIELDS = ("kind", "model", "base_url", "max_tokens", "max_cost_usd", "tool_choice", "seed")
# Chat Completions' ``seed``: the provider samples deterministically where it can (a
# trial gives each repetition its own, trials.spec.proposer_for).
MAX_SEED = 2**63 - 1
# An outside agent's run takes the same budget as a model run's: the model proxy
# refuses its model calls once it is spent (runs.agents.usage).
AGENT_FIELDS = ("kind", "preset", "model", "max_tokens", "max_cost_usd")
TOOL_CHOICES = {"openai": ("required", "auto"), "anthropic": ("any", "auto")}
_SECRET_WORDS = ("key", "token", "secret", "password", "authorization")


def _provider_settings(kind: str) -> tuple[str, str, list[str], str]:
    """(api key, default base URL, allowed base URLs, name of the key's variable)."""
    if kind == "openai":
        return settings.OPENAI_API_KEY, settings.OPENAI_BASE_URL, list(settings.OPENAI_ALLOWED_BASE_URLS), "OPENAI_API_KEY"
    return settings.ANTHROPIC_API_KEY, settings.ANTHROPIC_BASE_URL, list(settings.ANTHROPIC_ALLOWED_BASE_URLS), "ANTHROPIC_API_KEY"


def check_proposer_config(config: object) -> dict[str, Any]:
    if not isinstance(config, dict):
        raise InputError("proposer", [FieldProblem("proposer", "must be an object with a 'kind'")])
    kind = config.get("kind")
    if kind not in PROPOSER_KINDS:
        raise InputError("proposer", [FieldProblem("proposer.kind", f"must be one of {', '.join(PROPOSER_KINDS)}")])
    if kind == "scripted":
        script = config.get("script")
        if not isinstance(script, list):
            said = (
                "must be a JSON list of proposals"
                if "script" in config
                else "required: the scripted proposer plays a JSON list of proposals"
            )
            raise InputError("proposer", [FieldProblem("proposer.script", said)])
        # Every entry is held to the shape gate 1 (parse) wants now, so a typo is named before the run
        # starts instead of becoming a refused proposal mid-run.
        problems = [FieldProblem(f"proposer.{name}", "unexpected field") for name in sorted(set(config) - {"kind", "script"})]
        problems += script_problems(script)
        if problems:
            raise InputError("proposer", problems)
        return config
    if kind == "agent":
        problems = _agent_config_problems(config)
        if problems:
            raise InputError("proposer", problems)
        return {name: config[name] for name in AGENT_FIELDS if name in config}
    problems = _model_config_problems(str(kind), config)
    if problems:
        raise InputError("proposer", problems)
    return {name: config[name] for name in MODEL_FIELDS if name in config}


def script_problems(script: list[object]) -> list[FieldProblem]:
    """Each scripted proposal that is not exactly {tool: string, args: object}."""
    problems = []
    for index, entry in enumerate(script):
        refused = parse(f"script[{index}]", entry)
        if isinstance(refused, Refuse):
            where = f"proposer.script[{index}]"
            problems += [FieldProblem(where if p.field == "(root)" else f"{where}.{p.field}", p.message) for p in refused.problems]
    return problems


def _agent_config_problems(config: dict[str, Any]) -> list[FieldProblem]:
    from runs.agents.proposer import PRESETS, startable

    problems = [FieldProblem(f"proposer.{name}", "unexpected field") for name in sorted(set(config) - set(AGENT_FIELDS))]
    preset = config.get("preset")
    if preset not in PRESETS:
        problems.append(FieldProblem("proposer.preset", f"required: one of {', '.join(PRESETS)}"))
    elif not startable(str(preset)):
        said = (
            "the server has no command for the 'any' agent (HARNESS_AGENT_ANY_COMMAND)"
            if preset == "any"
            else f"the {preset} agent is not available on this server"
        )
        problems.append(FieldProblem("proposer.preset", said))
    model = config.get("model")
    if model is not None and (not isinstance(model, str) or not model.strip() or len(model) > 200 or any(c.isspace() for c in model)):
        problems.append(FieldProblem("proposer.model", "a model name (no spaces, at most 200 characters)"))
    return problems + _budget_problems(config)


def _budget_problems(config: dict[str, Any]) -> list[FieldProblem]:
    """The run's own model budget, a model run's or an outside agent's (whose model
    calls the model proxy counts against it: runs.agents.usage)."""
    problems = []
    max_tokens = config.get("max_tokens")
    if max_tokens is not None and (isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1):
        problems.append(FieldProblem("proposer.max_tokens", "must be a positive integer (tokens for the whole run)"))
    max_cost = config.get("max_cost_usd")
    if max_cost is not None and (
        isinstance(max_cost, bool) or not isinstance(max_cost, int | float) or not math.isfinite(max_cost) or max_cost <= 0
    ):
        problems.append(FieldProblem("proposer.max_cost_usd", "must be a positive number (US dollars for the whole run)"))
    return problems


def _model_config_problems(kind: str, config: dict[str, Any]) -> list[FieldProblem]:
    from adapters.pricing import parse_price_table, price_for

    problems: list[FieldProblem] = []
    for name in sorted(set(config) - set(MODEL_FIELDS)):
        if any(word in name.lower() for word in _SECRET_WORDS):
            problems.append(FieldProblem(f"proposer.{name}", "credentials come from the server's settings, never from a run"))
        else:
            problems.append(FieldProblem(f"proposer.{name}", "unexpected field"))
    model = config.get("model")
    if not isinstance(model, str) or not model.strip() or len(model) > 200 or any(c.isspace() for c in model):
        problems.append(FieldProblem("proposer.model", "required: a model name (no spaces, at most 200 characters)"))
        model = None
    api_key, default_url, allowed_urls, key_name = _provider_settings(kind)
    if not api_key:
        problems.append(FieldProblem("proposer.kind", f"the server has no {key_name} configured"))
    base_url = config.get("base_url")
    if base_url is not None and (not isinstance(base_url, str) or base_url.rstrip("/") not in [u.rstrip("/") for u in allowed_urls]):
        setting = f"HARNESS_{kind.upper()}_ALLOWED_BASE_URLS"
        problems.append(
            FieldProblem("proposer.base_url", f"must be one of the server's allowed base URLs ({setting}): {', '.join(allowed_urls)}")
        )
    problems += _budget_problems(config)
    seed = config.get("seed")
    if seed is not None and kind != "openai":
        problems.append(FieldProblem("proposer.seed", "only an openai model takes a seed"))
    elif seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed <= MAX_SEED):
        problems.append(FieldProblem("proposer.seed", f"must be an integer from 0 to {MAX_SEED}"))
    tool_choice = config.get("tool_choice")
    if tool_choice is not None and tool_choice not in TOOL_CHOICES[kind]:
        problems.append(FieldProblem("proposer.tool_choice", f"must be one of {', '.join(TOOL_CHOICES[kind])}"))
    if model is not None and price_for(model, parse_price_table(settings.HARNESS_MODEL_PRICES)) is None:
        problems.append(
            FieldProblem("proposer.model", f"{model!r} has no price in HARNESS_MODEL_PRICES, so its cost budget cannot be enforced")
        )
    return problems


class RefusingProposer:
    """Stands in for a model proposer whose configuration the server no longer
    accepts (key removed, base URL no longer allowed...): the run stops model_error."""

    def __init__(self, message: str) -> None:
        self.message = message
        self._notes: list[dict[str, JSON]] = [{"kind": "error", "message": message}]

    def propose(self, feedback: object) -> object | None:
        raise ProposerStopped("model_error", self.message)

    def snapshot(self) -> dict[str, JSON]:
        return {"kind": "refused", "message": self.message}

    def refused(self) -> None:
        """It never proposes."""

    def notes(self) -> list[dict[str, JSON]]:
        notes, self._notes = self._notes, []
        return notes


class MaskingProposer:
    """Masks secrets in every proposal before the gates see it (common.redact explains
    why here): the run, its approval key and everything stored then agree on the
    masked arguments, and a resumed run computes the same key again."""

    def __init__(self, inner: Proposer) -> None:
        self.inner = inner

    def propose(self, feedback: Any) -> object | None:
        # Each mask names the kind it hides: the proposal is read here, unmasked and
        # in memory only, and a later scan of the workspace (common.secret_scan)
        # reads the kind back from the mask.
        masked: object | None = redact(self.inner.propose(feedback), kinds=True)
        return masked

    def snapshot(self) -> dict[str, JSON]:
        return self.inner.snapshot()

    def refused(self) -> None:
        self.inner.refused()

    def notes(self) -> list[dict[str, JSON]]:
        return self.inner.notes()


def build_proposer(
    config: dict[str, Any],
    snapshot: dict[str, Any],
    contract: Contract | None = None,
    tools: Sequence[ToolSpec] = (),
    *,
    deadline: float | None = None,
    clock: Clock | None = None,
    revision: str | None = None,
    repository: Callable[[], RepositoryContext] | None = None,
    bound: Callable[[], Budget] | None = None,
    run_id: str | None = None,
    controls: Controls | None = None,
    lease_token: int | None = None,
) -> Proposer:
    """The run's proposer, continuing from ``snapshot``. Model proposers need the
    contract and the visible tools for their first message, and the workspace's
    ``repository`` context while the conversation has not begun; ``deadline`` bounds
    their retries, ``bound`` their model budget beyond the run's and the server's (its
    project's: runs.budgets; asked only for a model). An agent's proposer needs the
    ``run_id`` (its MCP calls are the run's), the run's ``controls`` (a kill while it
    waits for the agent's next call) and the driver's ``lease_token`` (what starting
    its agent writes to the run's log is fenced by it). Every proposal it gives is masked
    (MaskingProposer)."""
    if config["kind"] == "agent":
        from runs.agents.proposer import build_agent_proposer

        if run_id is None:
            raise ValueError("an agent's proposer needs the run's id")
        return MaskingProposer(
            build_agent_proposer(
                run_id,
                config,
                snapshot,
                tools,
                controls=controls,
                clock=clock,
                deadline=deadline,
                result_chars=int(settings.HARNESS_MODEL_MAX_RESULT_CHARS),
                lease_token=lease_token,
            )
        )
    return MaskingProposer(
        _build(config, snapshot, contract, tools, deadline=deadline, clock=clock, revision=revision, repository=repository, bound=bound)
    )


def _build(
    config: dict[str, Any],
    snapshot: dict[str, Any],
    contract: Contract | None,
    tools: Sequence[ToolSpec],
    *,
    deadline: float | None,
    clock: Clock | None,
    revision: str | None,
    repository: Callable[[], RepositoryContext] | None,
    bound: Callable[[], Budget] | None = None,
) -> Proposer:
    if config["kind"] == "scripted":
        return ScriptedProposer(config["script"], position=int(snapshot.get("position", 0)))
    if config["kind"] not in MODEL_KINDS:
        raise ValueError(f"unknown proposer kind {config['kind']!r}")
    if contract is None:
        raise ValueError("a model proposer needs the run's contract")
    try:
        check_proposer_config(config)
    except InputError as exc:
        return RefusingProposer(f"the proposer configuration is no longer accepted: {exc}")
    # Read only for a conversation not yet begun: later turns replay the stored messages.
    context = RepositoryContext()
    if repository is not None and not snapshot.get("messages"):
        try:
            context = repository()
        except Exception:  # the model can still list and read files itself
            log.warning("could not read the repository for the first message", exc_info=True)
    return _model_proposer(
        config, snapshot, contract, tools, deadline=deadline, clock=clock, revision=revision, repository=context, bound=bound
    )


def server_budget() -> tuple[int, float]:
    return int(settings.HARNESS_MODEL_MAX_TOKENS), float(settings.HARNESS_MODEL_MAX_COST_USD)


def _model_proposer(
    config: dict[str, Any],
    snapshot: dict[str, Any],
    contract: Contract,
    tools: Sequence[ToolSpec],
    *,
    deadline: float | None,
    clock: Clock | None,
    revision: str | None,
    repository: RepositoryContext,
    bound: Callable[[], Budget] | None,
) -> Proposer:
    from adapters.context import TaskContext, ToolDef
    from adapters.conversation import AdapterSettings
    from adapters.pricing import Budget, parse_price_table, price_for
    from adapters.retries import RetryPolicy

    kind = config["kind"]
    api_key, default_url, _, _ = _provider_settings(kind)
    max_tokens, max_cost = server_budget()
    budget = Budget(config.get("max_tokens"), config.get("max_cost_usd")).intersect(Budget(max_tokens, max_cost))
    common: dict[str, Any] = {
        "model": config["model"],
        "api_key": api_key,
        "context": TaskContext.from_contract(
            contract,
            revision=revision,
            instructions=repository.instructions,
            state=repository.state,
            sources=repository.sources,
        ),
        "tools": [ToolDef.from_spec(spec) for spec in tools],
        "budget": budget,
        "bound": bound,
        "price": price_for(config["model"], parse_price_table(settings.HARNESS_MODEL_PRICES)),
        "snapshot": snapshot,
        "settings": AdapterSettings(
            request_timeout_seconds=float(settings.HARNESS_MODEL_TIMEOUT_SECONDS),
            max_output_tokens=int(settings.HARNESS_MODEL_MAX_OUTPUT_TOKENS),
            max_result_chars=int(settings.HARNESS_MODEL_MAX_RESULT_CHARS),
            retry=RetryPolicy(
                max_retries=int(settings.HARNESS_MODEL_MAX_RETRIES),
                base_seconds=float(settings.HARNESS_MODEL_RETRY_BASE_SECONDS),
                max_seconds=float(settings.HARNESS_MODEL_RETRY_MAX_SECONDS),
            ),
        ),
        "clock": clock,
        "deadline": deadline,
        "base_url": config.get("base_url") or default_url,
    }
    if "tool_choice" in config:
        common["tool_choice"] = config["tool_choice"]
    if kind == "openai":
        from adapters.openai_adapter import OpenAIProposer

        return OpenAIProposer(**common, output_limit=settings.HARNESS_OPENAI_OUTPUT_LIMIT, seed=config.get("seed"))
    from adapters.anthropic_adapter import AnthropicProposer

    return AnthropicProposer(**common)


def proposer_usage(config: dict[str, Any], snapshot: dict[str, Any]) -> dict[str, JSON] | None:
    """Tokens and cost so far against the run's budget, for the run page and the API."""
    if config.get("kind") not in MODEL_KINDS:
        return None
    usage = snapshot.get("usage") if isinstance(snapshot.get("usage"), dict) else {}
    budget = snapshot.get("budget") if isinstance(snapshot.get("budget"), dict) else {}
    if not budget:
        max_tokens, max_cost = server_budget()
        budget = {
            "max_tokens": min(config.get("max_tokens") or max_tokens, max_tokens),
            "max_cost_usd": min(config.get("max_cost_usd") or max_cost, max_cost),
        }
    assert isinstance(usage, dict) and isinstance(budget, dict)
    return {
        "model": config.get("model"),
        "provider": config.get("kind"),
        "requests": usage.get("requests", 0),
        "input_tokens": usage.get("input_tokens", 0),
        "output_tokens": usage.get("output_tokens", 0),
        "tokens": int(usage.get("input_tokens", 0)) + int(usage.get("output_tokens", 0)),
        "cost_usd": usage.get("cost_usd", 0.0),
        "estimated": usage.get("estimated", False),
        "max_tokens": budget.get("max_tokens"),
        "max_cost_usd": budget.get("max_cost_usd"),
    }
