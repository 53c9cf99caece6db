"""Gates 4-7 (authorize, effects already known, evidence, approval): one function each,
deciding whether a call through gates 1-3 (parse, resolve, validate) may run. A call
goes through them again when a wait for it ends or it is retried after a crash; the
loop (``core.loop``) chains them and acts on what they decide."""

from __future__ import annotations

from collections.abc import Mapping

from core.call_record import CallRecord
from core.context import RunContext
from core.decisions import Ask, Authorized, Blocked, ChangesRequested, Deny, Duplicate, Execute, NeedsEvidence, Proceed, Stop
from core.effects import Plan
from core.jsonutil import JSON, digest
from core.policy import Authorization, authorize
from core.state import Operation
from core.tools import ToolSpec
from core.waits import changes_key, key_now


def operation_key(run_id: str, tool: str, args: Mapping[str, JSON], revision: str) -> str:
    """The idempotency key of an external effect: what the effect is, never which call
    asked for it, so the same effect proposed again is found (docs/design.md, Approvals)."""
    return digest({"run": run_id, "tool": tool, "args": dict(args), "revision": revision})[:32]


def authorize_call(run: RunContext, record: CallRecord, spec: ToolSpec) -> Deny | Authorized:
    """Gate 4, authorize: the first policy rule that matches decides."""
    authorization = authorize(run.policy, spec.name, record.args, spec.version)
    if authorization.decision == "deny":
        return Deny(
            record.call_id,
            spec.name,
            rule=authorization.rule,
            reason="policy denies this call",
            message=f"policy denies {spec.name} ({authorization.rule})",
            policy_version=run.policy.version,
            record=record,
        )
    return Authorized(authorization)


def known_effects(run: RunContext, record: CallRecord, spec: ToolSpec) -> Proceed | Duplicate | Blocked:
    """Gate 5, effects already known: the same external effect is never performed twice,
    and nothing effectful runs while an effect's outcome is unknown."""
    if spec.external_effect:
        done = _already_done(run, record)
        if done is not None:
            return Duplicate(record, done)
    pending = run.state.unresolved_effects()
    if pending and spec.has_effect:
        return Blocked(record, pending)
    return Proceed()


def _already_done(run: RunContext, record: CallRecord) -> Operation | None:
    """The same external effect applied, under way or of unknown outcome (only one
    known not to have happened may be performed again)."""
    done = run.state.operations.get(record.idempotency_key or "")
    if done is None or done.status == "not_applied" or done.call_id == record.call_id:
        return None
    return done


def unresolved(run: RunContext) -> Proceed | Stop:
    """Gate 5, effects already known, for finish: a run with effects of unknown outcome cannot be complete."""
    pending = run.state.unresolved_effects()
    if pending:
        return Stop("unresolved", f"finish with {len(pending)} pending effect(s) of unknown outcome")
    return Proceed()


def evidence(run: RunContext, record: CallRecord, spec: ToolSpec, authorization: Authorization | None) -> Proceed | NeedsEvidence:
    """Gate 6, evidence: every verification target passed on the current revision,
    for finish, a tool that needs evidence, or a rule that requires it."""
    if not spec.finishes and not spec.needs_evidence and not (authorization is not None and authorization.requires_evidence):
        return Proceed()
    missing = run.state.missing_checks()
    return NeedsEvidence(record, missing) if missing else Proceed()


def approval(run: RunContext, record: CallRecord, spec: ToolSpec, authorization: Authorization) -> Ask | ChangesRequested | Execute:
    """Gate 7, approval: no effect without a consumed grant for exactly this tool, these
    arguments, this revision, this policy version and this fixed effect; the exact call
    a reviewer asked changes to is shown their words again, never asked for again."""
    if authorization.decision != "ask":
        return Execute(record, spec, authorization)
    if record.granted_key == key_now(run, record):
        return Execute(record, spec, authorization)
    key = changes_key(record, run.state.revision, run.policy.version)
    earlier = run.state.changes_requested.get(key)
    if earlier is not None:
        return ChangesRequested(record, key, earlier["request_id"], earlier["message"], earlier["by"], repeated=True)
    return Ask(record, spec, authorization)


def fix_effect(run: RunContext, record: CallRecord, spec: ToolSpec) -> Plan | None:
    """Fix an external call's effect now, from the workspace and this process's
    configuration, dated when its proposal arrived (the same effect again after a
    crash); from here on it is what the request shows, what the key binds and what
    the executor performs, whichever process does (core.effects)."""
    if not spec.external_effect or record.idempotency_key is None:
        return None
    at = run.state.proposed_at if run.state.proposed_at is not None else run.clock.now()
    plan = run.workspace.plan(spec.name, record.args, record.idempotency_key, at)
    record.effect = plan.effect if plan is not None else None
    return plan
