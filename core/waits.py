"""Waiting for reviewers (gate 7, approval): the request filed for exactly one call, the wait's
clock (time waiting for a human is not working time), and how a wait ends
(``core.lifecycle.WAIT_EXITS``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from core import events as ev
from core.driver import Driver, Stop
from core.effects import Plan
from core.jsonutil import JSON, digest
from core.lifecycle import CANCELLED_OUTCOME, WAIT_EXITS, WaitExit, exit_of
from core.policy import Authorization
from core.ports import ApprovalAsk
from core.state import CallRecord, Waiting
from core.tools import ToolSpec


def approval_key(tool: str, args: Mapping[str, JSON], revision: str, policy_version: int, effect: Mapping[str, JSON] | None) -> str:
    """What a grant is bound to; ``effect`` is an external call's fixed effect
    (core.effects), so a grant covers exactly the commit, branch or request shown."""
    fixed = dict(effect) if effect is not None else None
    return digest({"tool": tool, "args": dict(args), "revision": revision, "policy_version": policy_version, "effect": fixed})


class Waits(Driver):
    def _end_wait_clock(self) -> None:
        """Time waiting for a human is not working time: it moves the deadline on and
        is counted apart. A wait that goes on is re-opened by ``_enter_wait``."""
        state = self.state
        self._wait_just_ended = 0.0
        if state.waiting_since is None:
            return
        waited = max(0.0, self.clock.now() - state.waiting_since)
        self._wait_just_ended = waited
        state.waited_seconds += waited
        state.deadline += waited
        state.waiting_since = None

    def _enter_wait(self) -> None:
        self.state.status = "waiting_approval"
        if self.state.waiting_since is None:
            self.state.waiting_since = self.clock.now()

    def _wait_left(self) -> float:
        """How long a new request may stay open: the policy's TTL, bounded by what is
        left of its limit on total waiting."""
        ttl = float(self.policy.approval_ttl_seconds)
        if self.policy.max_wait_seconds is None:
            return ttl
        return min(ttl, self.policy.max_wait_seconds - self.state.waited_seconds)

    def _approval_key(self, record: CallRecord) -> str:
        return approval_key(record.tool, record.args, self.state.revision, self.policy.version, record.effect)

    def _ask(self, record: CallRecord, spec: ToolSpec, auth: Authorization, plan: Plan | None) -> None:
        """File (or find) the request for exactly this call (and ``plan``, its fixed
        external effect) and wait for it."""
        state = self.state
        wait_left = self._wait_left()
        # A reviewer is never offered a grant the run could not use.
        if wait_left <= 0:
            record.state = "failed"
            raise Stop("approval_expired", f"the policy's limit of {self.policy.max_wait_seconds}s on waiting for reviewers is used up")
        if state.calls >= state.limits.max_tool_calls:
            record.state = "failed"
            raise Stop("budget_exhausted", f"call budget of {state.limits.max_tool_calls} used: a grant could not be used")
        key = self._approval_key(record)
        record.approval_key = key
        # What the reviewer is asked about is exactly what the audit trail records.
        asked: dict[str, Any] = {
            "tool": spec.name,
            "args": record.args,
            "revision": state.revision,
            "policy_version": self.policy.version,
            "key": key,
            "rule": auth.rule,
            "effect": record.effect,
        }
        if plan is not None:
            shown: str | None = plan.shown
        else:
            shown = self.workspace.preview(spec.name, record.args) if spec.has_effect else None
        # Fixing an effect or making a preview can take long; a kill meanwhile asks nobody.
        self._guard("after the preview")
        ask = ApprovalAsk(
            run_id=state.run_id,
            call_id=record.call_id,
            actor=state.actor,
            diff=shown,
            evidence=[state.evidence[i].model_dump() for i in state.current_evidence.values()],
            expires_in_seconds=wait_left,
            **asked,
        )
        filed = self.approvals.request(ask)
        if filed.new or state.waiting is None or state.waiting.request_id != filed.request_id:
            self._emit(ev.ApprovalRequired, call_id=record.call_id, request_id=filed.request_id, **asked)
        state.waiting = Waiting(
            call_id=record.call_id,
            request_id=filed.request_id,
            approval_key=key,
            revision=state.revision,
            policy_version=self.policy.version,
        )
        self._enter_wait()
        self._checkpoint()

    def _resume_waiting(self) -> None:
        """Decide how the wait ends (core.lifecycle.WAIT_EXITS), or that it goes on."""
        state = self.state
        waiting = state.waiting
        assert waiting is not None
        record = state.ledger[waiting.call_id]
        spec = self.registry.get(record.tool)
        assert spec is not None
        self._guard("resuming a wait")
        if self._approval_key(record) != waiting.approval_key:
            reason = self._stale_reason(waiting)
            self.approvals.lapse(waiting.request_id, "stale", reason)
            return self._leave_wait("stale", reason, record, spec)
        found = self.approvals.state(waiting.request_id)
        if found.due:
            self.approvals.lapse(waiting.request_id, "expired", "no decision before the request expired")
            found = self.approvals.state(waiting.request_id)
        if found.status == "granted" and self.approvals.consume(waiting.request_id, record.call_id):
            found = self.approvals.state(waiting.request_id)
        exit = exit_of(found.status)
        if found.status == "consumed" and found.consumed_by_call != record.call_id:
            reason = f"the grant was used by {found.consumed_by_call}"
            return self._leave_wait("stale", reason, record, spec)
        if exit is None or found.status == "granted":
            # Still pending (or a grant not usable this instant): the wait goes on.
            self._enter_wait()
            self._checkpoint()
            return
        self._leave_wait(exit, found.reason, record, spec)

    def _stale_reason(self, waiting: Waiting) -> str:
        state = self.state
        if waiting.policy_version != self.policy.version:
            return f"policy v{self.policy.version} replaced v{waiting.policy_version} while the request waited"
        if waiting.revision != state.revision:
            return f"the workspace moved from {waiting.revision[:12]} to {state.revision[:12]} while the request waited"
        return "the call no longer matches the request"

    def _leave_wait(self, exit: WaitExit, reason: str, record: CallRecord, spec: ToolSpec) -> None:
        """End the wait the way ``WAIT_EXITS[exit]`` says."""
        state = self.state
        waiting = state.waiting
        assert waiting is not None
        transition = WAIT_EXITS[exit]
        self._emit_wait_ended(exit, reason)
        state.waiting = None
        state.status = "running"
        if transition.run == "stopped":
            record.state = "failed"
            if transition.request == "denied":
                # The reviewer's refusal of exactly this call is on the call's record too.
                self._emit(
                    ev.ApprovalRefused, call_id=record.call_id, key=waiting.approval_key, request_id=waiting.request_id, reason=reason
                )
            raise Stop(transition.outcome or CANCELLED_OUTCOME, f"approval {exit}: {reason}")
        if transition.request == "consumed":
            record.granted_key = waiting.approval_key
            self._emit(ev.ApprovalConsumed, call_id=record.call_id, key=waiting.approval_key, request_id=waiting.request_id)
        else:
            record.approval_key = None
            record.effect = None  # fixed anew, at the current revision, if it asks again
        # The run goes on: the call goes back through the gates at the current revision
        # and under the current policy, with the grant it consumed or without one.
        self._admit(record, spec)
