"""Waiting for reviewers (gate 7, approval): the request filed for exactly one call, the wait's
clock (time waiting for a human is not working time), and how a wait ends
(``core.lifecycle.WAIT_EXITS``): each returns what the loop does next."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from core import events as ev
from core.call_record import CallRecord
from core.context import RunContext, guard
from core.decisions import ChangesRequested, KeepWaiting, Regate, Stop
from core.effects import Plan
from core.jsonutil import JSON, digest
from core.lifecycle import CANCELLED_OUTCOME, WAIT_EXITS, WaitExit, exit_of
from core.policy import Authorization
from core.ports import ApprovalAsk
from core.recording import emit, emit_wait_ended
from core.state import Waiting
from core.tools import ToolSpec


def approval_key(tool: str, args: Mapping[str, JSON], revision: str, policy_version: int, effect: Mapping[str, JSON] | None) -> str:
    """What a grant is bound to; ``effect`` is an external call's fixed effect
    (core.effects), so a grant covers exactly the commit, branch or request shown."""
    fixed = dict(effect) if effect is not None else None
    return digest({"tool": tool, "args": dict(args), "revision": revision, "policy_version": policy_version, "effect": fixed})


def changes_key(record: CallRecord, revision: str, policy_version: int) -> str:
    """What a reviewer's "request changes" is bound to: the call itself (tool, arguments,
    revision, policy version), known before its effect is fixed, which the same call
    at the same revision fixes the same."""
    return approval_key(record.tool, record.args, revision, policy_version, None)


def key_now(run: RunContext, record: CallRecord) -> str:
    """The key a grant for ``record`` needs at the current revision, under the policy in force."""
    return approval_key(record.tool, record.args, run.state.revision, run.policy.version, record.effect)


def end_wait_clock(run: RunContext) -> None:
    """Time waiting for a human is not working time: how long the wait in progress has
    lasted when the run is picked up, which its ``wait_ended`` adds to the time waited
    and to the deadline (core.fold). A wait that goes on keeps its clock running."""
    since = run.state.waiting_since
    run.wait_just_ended = 0.0 if since is None else max(0.0, run.clock.now() - since)


def _wait_left(run: RunContext) -> float:
    """How long a new request may stay open: the policy's TTL, bounded by what is
    left of its limit on total waiting."""
    ttl = float(run.policy.approval_ttl_seconds)
    if run.policy.max_wait_seconds is None:
        return ttl
    return min(ttl, run.policy.max_wait_seconds - run.state.waited_seconds)


def ask(run: RunContext, record: CallRecord, spec: ToolSpec, authorization: Authorization, plan: Plan | None) -> Stop | KeepWaiting:
    """File (or find) the request for exactly this call (and ``plan``, its fixed
    external effect), to wait for it."""
    state = run.state
    wait_left = _wait_left(run)
    # A reviewer is never offered a grant the run could not use.
    if wait_left <= 0:
        return Stop("approval_expired", f"the policy's limit of {run.policy.max_wait_seconds}s on waiting for reviewers is used up", record)
    if state.calls >= state.limits.max_tool_calls:
        return Stop("budget_exhausted", f"call budget of {state.limits.max_tool_calls} used: a grant could not be used", record)
    key = key_now(run, record)
    # What the reviewer is asked about is exactly what the audit trail records.
    asked: dict[str, Any] = {
        "tool": spec.name,
        "args": record.args,
        "revision": state.revision,
        "policy_version": run.policy.version,
        "key": key,
        "rule": authorization.rule,
        "effect": record.effect,
    }
    if plan is not None:
        shown: str | None = plan.shown
    else:
        shown = run.workspace.preview(spec.name, record.args) if spec.has_effect else None
    # Read with the diff, at the same revision: what the reviewer expands it from.
    sources = run.workspace.sources(spec.name, record.args) if shown else {}
    # Fixing an effect or making a preview can take long; a kill meanwhile asks nobody.
    guard(run, "after the preview")
    filed = run.approvals.request(
        ApprovalAsk(
            run_id=state.run_id,
            call_id=record.call_id,
            actor=state.actor,
            diff=shown,
            sources=sources,
            evidence=[state.evidence[i].model_dump() for i in state.current_evidence.values()],
            expires_in_seconds=wait_left,
            reviewers=authorization.reviewers,
            **asked,
        )
    )
    # The event puts the run in the wait (core.fold); the request already waited for needs none.
    if filed.new or state.waiting is None or state.waiting.request_id != filed.request_id:
        emit(run, ev.ApprovalRequired, call_id=record.call_id, request_id=filed.request_id, idempotency_key=record.idempotency_key, **asked)
    return KeepWaiting()


def resume(run: RunContext) -> KeepWaiting | Regate | ChangesRequested | Stop:
    """Decide how the wait ends (core.lifecycle.WAIT_EXITS), or that it goes on."""
    state = run.state
    waiting = state.waiting
    assert waiting is not None
    record = state.ledger[waiting.call_id]
    spec = run.registry.get(record.tool)
    assert spec is not None
    guard(run, "while resuming a wait")
    approvals = run.approvals
    if key_now(run, record) != waiting.approval_key:
        reason = _stale_reason(run, waiting)
        approvals.lapse(waiting.request_id, "stale", reason)
        return _leave(run, "stale", reason, record, spec)
    found = approvals.state(waiting.request_id)
    if found.due:
        approvals.lapse(waiting.request_id, "expired", "no decision before the request expired")
        found = approvals.state(waiting.request_id)
    if found.status == "granted" and approvals.consume(waiting.request_id, record.call_id):
        found = approvals.state(waiting.request_id)
    exit = exit_of(found.status)
    if found.status == "consumed" and found.consumed_by_call != record.call_id:
        return _leave(run, "stale", f"the grant was used by {found.consumed_by_call}", record, spec)
    if exit is None or found.status == "granted":
        # Still pending (or a grant not usable this instant): the wait goes on.
        return KeepWaiting()
    return _leave(run, exit, found.reason, record, spec, found.decided_by)


def _stale_reason(run: RunContext, waiting: Waiting) -> str:
    if waiting.policy_version != run.policy.version:
        return f"policy v{run.policy.version} replaced v{waiting.policy_version} while the request waited"
    if waiting.revision != run.state.revision:
        return f"the workspace moved from {waiting.revision[:12]} to {run.state.revision[:12]} while the request waited"
    return "the call no longer matches the request"


def _leave(
    run: RunContext, exit: WaitExit, reason: str, record: CallRecord, spec: ToolSpec, by: str = ""
) -> Regate | ChangesRequested | Stop:
    """End the wait the way ``WAIT_EXITS[exit]`` says (``reason``: the reviewer's or the
    lapse's words, ``by``: who decided)."""
    state = run.state
    waiting = state.waiting
    assert waiting is not None
    transition = WAIT_EXITS[exit]
    emit_wait_ended(run, exit, reason)
    if transition.run == "stopped":
        if transition.request == "denied":
            # The reviewer's refusal of exactly this call is on the call's record too.
            emit(run, ev.ApprovalRefused, call_id=record.call_id, key=waiting.approval_key, request_id=waiting.request_id, reason=reason)
        return Stop(transition.outcome or CANCELLED_OUTCOME, f"approval {exit}: {reason}", record)
    if transition.request == "changes_requested":
        key = changes_key(record, waiting.revision, waiting.policy_version)
        return ChangesRequested(record.model_copy(deep=True), key, waiting.request_id, reason, by)
    if transition.request == "consumed":
        emit(run, ev.ApprovalConsumed, call_id=record.call_id, key=waiting.approval_key, request_id=waiting.request_id)
    # The run goes on: the call goes back through the gates at the current revision
    # and under the current policy, with the grant it consumed or without one (its
    # effect then fixed anew if it asks again: core.fold_calls), deciding on a
    # working copy of its record.
    return Regate(state.ledger[record.call_id].model_copy(deep=True), spec)
