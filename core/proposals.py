"""Gates 1-3 (parse, resolve, validate; and the contract's list of tools): what a
proposal is, deciding without acting, and what is kept of one (docs/design.md, Gates)."""

from __future__ import annotations

from core import storable
from core.context import RunContext
from core.decisions import Accepted, Deny, Parsed, Refuse
from core.errors import FieldProblem, InputError
from core.jsonutil import JSON
from core.tools import ToolSpec

# The largest proposal taken, as UTF-8 JSON: room for the largest file a write may
# carry (5,000,000 characters), not for anything without bound.
MAX_PROPOSAL_BYTES = 24 * 2**20
# What a refusal keeps of each problem, and how many problems it lists: the field
# names and messages of a refused proposal can quote the proposal itself.
PROBLEM_CHARS = 300


def parse(call_id: str, raw: object) -> Refuse | Parsed:
    """Gate 1, parse: storable JSON, exactly {tool, args}."""
    unfit = storable.problems(raw, max_bytes=MAX_PROPOSAL_BYTES)
    if unfit:
        return Refuse(call_id, "parse", unfit)
    if not isinstance(raw, dict):
        return Refuse(call_id, "parse", [FieldProblem("(root)", "a proposal must be an object {tool, args}")])
    problems = [FieldProblem(name, "unexpected field (a proposal is exactly {tool, args})") for name in raw if name not in ("tool", "args")]
    if not isinstance(raw.get("tool"), str):
        problems.append(FieldProblem("tool", "required, must be a string"))
    if not isinstance(raw.get("args"), dict):
        problems.append(FieldProblem("args", "required, must be an object"))
    if problems:
        return Refuse(call_id, "parse", problems)
    return Parsed(call_id, raw["tool"], raw["args"])


def resolve(run: RunContext, parsed: Parsed) -> Refuse | Deny | Accepted:
    """Gate 2, resolve: a tool of the registry, and one the contract allows (or finish)."""
    spec = run.registry.get(parsed.tool)
    if spec is None:
        return Refuse(parsed.call_id, "resolve", [FieldProblem("tool", f"unknown tool {parsed.tool!r}")])
    if not spec.finishes and spec.name not in run.state.contract.allowed_tools:
        return Deny(
            parsed.call_id,
            spec.name,
            rule="contract",
            reason="tool not in the contract's allowed_tools",
            message=f"{spec.name} is not allowed for this run",
        )
    return Accepted(parsed.call_id, spec, parsed.args)


def validate(run: RunContext, accepted: Accepted) -> Refuse | Accepted:
    """Gate 3, validate: the arguments as the tool's model, the contract's write paths
    and the policy's checks take them."""
    spec, args = accepted.spec, accepted.args
    try:
        if spec.finishes:
            run.registry.validate(spec, args, ())
            return accepted
        clean = run.registry.validate(spec, args, run.state.contract.allowed_write_paths)
        if spec.runs_check is not None and run.policy.check(clean[spec.runs_check]) is None:
            raise InputError("arguments", [FieldProblem(f"args.{spec.runs_check}", f"unknown check {clean[spec.runs_check]!r}")])
        return Accepted(accepted.call_id, spec, clean, _key_to_look_up(run, spec, clean))
    except InputError as exc:
        return Refuse(accepted.call_id, "validate", exc.problems)


def _key_to_look_up(run: RunContext, spec: ToolSpec, args: dict[str, JSON]) -> str | None:
    """A lookup needs no internal key from the model: without one it looks up this
    run's effect of that tool, the unresolved one first, else the latest (at the
    current revision if there is one)."""
    if spec.looks_up is None:
        return None
    given = args.get("idempotency_key")
    if isinstance(given, str):
        return given
    state = run.state
    unresolved = [p.idempotency_key for p in state.unresolved_effects() if p.tool == spec.looks_up and p.idempotency_key]
    if unresolved:
        return unresolved[-1]
    done = [op for op in state.operations.values() if op.tool == spec.looks_up]
    chosen = [op for op in done if op.revision == state.revision] or done
    if not chosen:
        raise InputError("arguments", [FieldProblem("args.idempotency_key", f"this run has no {spec.looks_up} to look up; give a key")])
    return chosen[-1].key


def kept(raw: object, screened: Refuse | Deny | Accepted) -> dict[str, JSON]:
    """The Proposed event's fields for what is kept of a proposal: the proposal
    itself, or, for one refused (by gates 1-3, parse, resolve, validate, or the contract) that is large or
    not storable, its size, digest and head."""
    if isinstance(screened, Accepted):
        return {"proposal": raw}
    found = storable.summary(raw)
    if found.bytes <= storable.HEAD_CHARS and not storable.problems(raw):
        return {"proposal": raw}
    return {"proposal": None, "summary": found.model_dump()}


def bounded(problems: list[FieldProblem]) -> list[FieldProblem]:
    """At most ``storable.MAX_PROBLEMS`` problems, each clipped: what a refusal stores
    and feeds back stays small whatever the proposal held."""

    def clip(text: str) -> str:
        return text if len(text) <= PROBLEM_CHARS else text[:PROBLEM_CHARS] + "..."

    clipped = [FieldProblem(clip(p.field), clip(p.message)) for p in problems[: storable.MAX_PROBLEMS]]
    if len(problems) > len(clipped):
        clipped.append(FieldProblem("(root)", f"and {len(problems) - len(clipped)} more problems"))
    return clipped
