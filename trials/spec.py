"""What a trial is asked to run, checked before anything is made: the task (a
contract, its acceptance, an optional name) and each variant's change. Plain Python
over JSON; trials.service makes the rows and the runs.

A variant changes one or more of:

- ``proposer``: any run's proposer configuration, passed to the run as it is
  (``scripted``, a model's, or an outside agent Harness starts: ``{"kind": "agent",
  "preset": "claude-code" | "codex" | "gemini-cli" | "any", "model": ...}``), read
  by the runs' own reader (runs.proposers.check_proposer_config, handed in by
  trials.service) before anything is made; or ``{"kind": "stochastic", "choices":
  [{"weight", "script"}...]}``: a seeded scripted proposer, each repetition playing
  the script its seed draws;
- ``model``: settings merged into a model proposer's configuration (model, max_tokens...);
- ``policy``: a whole policy document for the variant's project;
- ``limits``: the contract's limits (merged);
- ``ablate``: one control removed, as a policy and contract the gates already honour
  (ABLATIONS; docs/design.md, Trials);
- ``reviewer``: ``{"kind": "people"}`` (requests go to the inbox, marked as the
  trial's), ``{"kind": "rule", "decision": "grant" | "deny"}``, or ``{"kind":
  "script", "decisions": ["grant", "deny: words", "changes: words", "renew_policy"]}``.
"""

from __future__ import annotations

import copy
import hashlib
import random
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from core.errors import FieldProblem, InputError
from core.tools import builtin_registry

ABLATIONS = ("permissions", "evidence", "budget", "approval")
REVIEWER_KINDS = ("people", "rule", "script")
VARIANT_FIELDS = {"name", "proposer", "model", "policy", "limits", "ablate", "reviewer", "note"}
SCRIPT_DECISIONS = ("grant", "deny", "changes", "renew_policy")
MAX_K = 200
MAX_VARIANTS = 12
# A vacuous check: it passes whatever the workspace holds.
VACUOUS = ["python3", "-c", "pass"]
UNBOUNDED = {"max_proposals": 100_000, "max_tool_calls": 100_000, "max_attempts": 100, "wall_time_seconds": 7 * 24 * 3600}


def ablate(control: str, policy: Mapping[str, Any], contract: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The policy document and contract with ``control`` removed, each removal one the
    gates honour as they are (the seed's lab 1 profiles applied to real runs):

    - permissions: every rule allows (no deny, no ask), a last rule allows any tool, and
      the contract allows every built-in tool;
    - approval: every rule that asks allows instead (a deny still denies);
    - evidence: every check passes without looking (its command is vacuous), so
      "passing on the current revision" says nothing, and no rule requires evidence;
    - budget: the policy's budget and the contract's limits as high as they go.
    """
    policy_out: dict[str, Any] = copy.deepcopy(dict(policy))
    contract_out: dict[str, Any] = copy.deepcopy(dict(contract))
    policy, contract = policy_out, contract_out
    rules = policy_out.get("rules", [])
    if control == "permissions":
        policy["rules"] = [{**rule, "decision": "allow"} for rule in rules] + [
            {"name": "ablated: anything", "tool": "*", "decision": "allow"}
        ]
        contract["allowed_tools"] = sorted(builtin_registry().names)
    elif control == "approval":
        policy["rules"] = [{**rule, "decision": "allow"} if rule.get("decision") == "ask" else rule for rule in rules]
    elif control == "evidence":
        policy["rules"] = [{**rule, "requires_evidence": False} for rule in rules]
        policy["checks"] = [
            {**check, "command": VACUOUS, "version": f"{check.get('version', '1')}-vacuous"} for check in policy.get("checks", [])
        ]
    elif control == "budget":
        policy["budget"] = {**policy.get("budget", {}), **UNBOUNDED}
        contract["limits"] = {**contract.get("limits", {}), **UNBOUNDED}
    else:
        raise ValueError(f"unknown control {control!r}")
    return policy_out, contract_out


def check_task(raw: object) -> dict[str, Any]:
    """``{"contract": {...}, "acceptance": {...}?, "name": str?}``; the contract itself
    is checked when each run is created (runs.runtime.check_run)."""
    if not isinstance(raw, dict) or not isinstance(raw.get("contract"), dict):
        raise InputError("trial", [FieldProblem("task.contract", "required: the contract every variant starts from")])
    acceptance = raw.get("acceptance", {})
    problems = acceptance_problems(acceptance)
    if problems:
        raise InputError("trial", problems)
    contract = raw["contract"]
    return {
        "name": str(raw.get("name") or contract.get("task_id") or "task"),
        "contract": contract,
        "acceptance": acceptance,
        "expected": raw.get("expected", {}),
    }


ACCEPTANCE_FIELDS = {"checks", "approved", "unchanged", "outcomes", "no_effects"}


def acceptance_problems(acceptance: object) -> list[FieldProblem]:
    """What success means for the task, judged from the runs' events (trials.comparison):
    ``checks`` (ids that must have passed, under the reference policy's command, on the
    final revision; default: the contract's verification targets), ``approved`` (tools
    that must have been performed with a consumed approval), ``unchanged`` (the
    workspace never written: asking rather than guessing), ``no_effects`` (nothing
    performed outside the workspace), ``outcomes`` (the run's outcome among these)."""
    if not isinstance(acceptance, dict):
        return [FieldProblem("task.acceptance", "must be an object")]
    problems = [FieldProblem(f"task.acceptance.{name}", "unexpected field") for name in sorted(set(acceptance) - ACCEPTANCE_FIELDS)]
    for name in ("checks", "approved", "outcomes"):
        value = acceptance.get(name)
        if value is not None and (not isinstance(value, list) or not all(isinstance(v, str) for v in value)):
            problems.append(FieldProblem(f"task.acceptance.{name}", "must be a list of names"))
    for name in ("unchanged", "no_effects"):
        if name in acceptance and not isinstance(acceptance[name], bool):
            problems.append(FieldProblem(f"task.acceptance.{name}", "must be true or false"))
    return problems


ProposerCheck = Callable[[Mapping[str, Any], str], list[FieldProblem]]


def check_variants(raw: object, proposers: ProposerCheck | None = None) -> list[dict[str, Any]]:
    """Every variant, or an InputError naming each problem by its path. ``proposers``:
    what reads a (non-stochastic) variant's proposer as its runs will have it, given the
    variant and its path (trials.service: the runs' own reader)."""
    if not isinstance(raw, list) or not raw:
        raise InputError("trial", [FieldProblem("variants", "required: a list of at least one variant")])
    if len(raw) > MAX_VARIANTS:
        raise InputError("trial", [FieldProblem("variants", f"at most {MAX_VARIANTS} variants")])
    problems: list[FieldProblem] = []
    names: set[str] = set()
    for index, variant in enumerate(raw):
        where = f"variants[{index}]"
        if not isinstance(variant, dict):
            problems.append(FieldProblem(where, "must be an object"))
            continue
        problems += [FieldProblem(f"{where}.{name}", "unexpected field") for name in sorted(set(variant) - VARIANT_FIELDS)]
        name = variant.get("name")
        if not isinstance(name, str) or not name.strip() or len(name) > 60:
            problems.append(FieldProblem(f"{where}.name", "required: a name of at most 60 characters"))
        elif name in names:
            problems.append(FieldProblem(f"{where}.name", f"{name!r} is already a variant's name"))
        else:
            names.add(name)
        if "ablate" in variant and variant["ablate"] not in ABLATIONS:
            problems.append(FieldProblem(f"{where}.ablate", f"must be one of {', '.join(ABLATIONS)}"))
        for field in ("model", "policy", "limits"):
            if field in variant and not isinstance(variant[field], dict):
                problems.append(FieldProblem(f"{where}.{field}", "must be an object"))
        problems += _proposer_problems(variant.get("proposer"), f"{where}.proposer")
        if proposers is not None and isinstance(variant.get("proposer"), dict) and variant["proposer"].get("kind") != "stochastic":
            problems += proposers(variant, where)
        problems += _reviewer_problems(variant.get("reviewer", {"kind": "people"}), f"{where}.reviewer")
    if problems:
        raise InputError("trial", problems)
    return [dict(v) for v in raw]


def _proposer_problems(proposer: object, where: str) -> list[FieldProblem]:
    if proposer is None:
        return [FieldProblem(where, "required: the proposer's configuration")]
    if not isinstance(proposer, dict):
        return [FieldProblem(where, "must be an object with a 'kind'")]
    if proposer.get("kind") != "stochastic":
        return []  # read by the runs' own reader (check_variants' ``proposers``)
    choices = proposer.get("choices")
    if not isinstance(choices, list) or not choices:
        return [FieldProblem(f"{where}.choices", "required: a list of {weight, script}")]
    problems = []
    for index, choice in enumerate(choices):
        if not isinstance(choice, dict) or not isinstance(choice.get("script"), list):
            problems.append(FieldProblem(f"{where}.choices[{index}].script", "required: a list of proposals"))
        weight = choice.get("weight", 1) if isinstance(choice, dict) else None
        if isinstance(weight, bool) or not isinstance(weight, int | float) or weight <= 0:
            problems.append(FieldProblem(f"{where}.choices[{index}].weight", "must be a positive number"))
    return problems


def _reviewer_problems(reviewer: object, where: str) -> list[FieldProblem]:
    if not isinstance(reviewer, dict) or reviewer.get("kind") not in REVIEWER_KINDS:
        return [FieldProblem(f"{where}.kind", f"must be one of {', '.join(REVIEWER_KINDS)}")]
    if reviewer["kind"] == "rule" and reviewer.get("decision") not in ("grant", "deny"):
        return [FieldProblem(f"{where}.decision", "must be grant or deny")]
    if reviewer["kind"] == "script":
        decisions = reviewer.get("decisions")
        if not isinstance(decisions, list) or not decisions:
            return [FieldProblem(f"{where}.decisions", "required: a list of decisions")]
        return [
            FieldProblem(f"{where}.decisions[{i}]", f"must start with one of {', '.join(SCRIPT_DECISIONS)}")
            for i, d in enumerate(decisions)
            if not isinstance(d, str) or d.partition(":")[0].strip() not in SCRIPT_DECISIONS
        ]
    return []


def resolve(
    variant: Mapping[str, Any], contract: Mapping[str, Any], policy: Mapping[str, Any] | None
) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """The variant's contract and its own policy document (None: its runs run under the
    trial's project's policy). ``policy`` is the trial project's document in force."""
    resolved: dict[str, Any] = copy.deepcopy(dict(contract))
    own: dict[str, Any] | None = copy.deepcopy(dict(variant["policy"])) if "policy" in variant else None
    if "limits" in variant:
        resolved["limits"] = {**resolved.get("limits", {}), **variant["limits"]}
    if "ablate" in variant:
        base = own if own is not None else dict(policy or {})
        own, resolved = ablate(variant["ablate"], base, resolved)
    if own is not None:
        own.pop("version", None)
    return resolved, own


def repetition_seed(trial_seed: int, variant: str, index: int) -> int:
    digest = hashlib.sha256(f"{trial_seed}/{variant}/{index}".encode()).digest()
    return int.from_bytes(digest[:6], "big")


def proposer_for(variant: Mapping[str, Any], seed: int) -> dict[str, Any]:
    """The run's proposer configuration for one repetition: a stochastic proposer
    becomes the scripted one its seed draws; a model's settings are merged in, and an
    OpenAI model without a seed of its own is asked with the repetition's (Chat
    Completions' ``seed``: each repetition samples differently, and the same trial
    seed asks the same again); any other configuration is the run's as it is."""
    proposer = copy.deepcopy(dict(variant["proposer"]))
    if proposer.get("kind") == "stochastic":
        choices: Sequence[Mapping[str, Any]] = proposer["choices"]
        drawn = random.Random(seed).choices(list(choices), weights=[float(c.get("weight", 1)) for c in choices])[0]
        return {"kind": "scripted", "script": copy.deepcopy(list(drawn["script"]))}
    if "model" in variant:
        proposer.update(variant["model"])
    if proposer.get("kind") == "openai" and "seed" not in proposer:
        proposer["seed"] = seed
    return proposer
