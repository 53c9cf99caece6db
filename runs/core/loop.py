"""The agent loop: each proposal passes the gates of DESIGN section 1 in order, every
outcome is an event, and the state is checkpointed after every step so a run
loaded from the store continues exactly where it stopped."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from runs.core import events as ev
from runs.core.contract import Contract
from runs.core.errors import FieldProblem, InputError
from runs.core.jsonutil import JSON, canonical_json, digest
from runs.core.lifecycle import CANCELLED_OUTCOME, WAIT_EXITS, WaitExit, exit_of
from runs.core.patchtext import patch_targets
from runs.core.policy import Authorization, CheckDef, Policy, authorize
from runs.core.ports import (
    ApprovalAsk,
    ApprovalGate,
    ArtifactStore,
    Call,
    Clock,
    Controls,
    Executor,
    NoControls,
    PolicySource,
    Proposer,
    ProposerStopped,
    RevisionMismatch,
    Store,
    SystemClock,
    Workspace,
)
from runs.core.receipts import Receipt, ReceiptInvalid, check_receipt
from runs.core.state import TERMINAL_STATES, CallRecord, EvidenceRecord, Operation, PendingEffect, RunState, Waiting
from runs.core.tools import FINISH, Registry, ToolSpec

RUN_CHECK = "run_check"


@dataclass(frozen=True)
class HarnessConfig:
    retry_base_seconds: float = 0.5
    retry_max_seconds: float = 30.0


class _Stop(Exception):
    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


def approval_key(tool: str, args: Mapping[str, JSON], revision: str, policy_version: int) -> str:
    return digest({"tool": tool, "args": dict(args), "revision": revision, "policy_version": policy_version})


def operation_key(run_id: str, tool: str, args: Mapping[str, JSON], revision: str) -> str:
    """The idempotency key of an external effect: what the effect is, never which call
    asked for it, so the same effect proposed again is found (DESIGN section 6)."""
    return digest({"run": run_id, "tool": tool, "args": dict(args), "revision": revision})[:32]


def as_json(value: object) -> JSON:
    """Untrusted values are recorded as they came, or as their repr if not JSON."""
    try:
        canonical_json(value)
    except (TypeError, ValueError):
        return {"unserialisable": repr(value)[:2000]}
    return value


def new_state(*, run_id: str, contract: Contract, policy: Policy, actor: str, revision: str, now: float) -> RunState:
    limits = contract.limits.intersect(policy.budget)
    return RunState(
        run_id=run_id,
        contract=contract,
        limits=limits,
        policy_version=policy.version,
        actor=actor,
        started_at=now,
        deadline=now + limits.wall_time_seconds,
        base_revision=revision,
        revision=revision,
    )


class Harness:
    def __init__(
        self,
        state: RunState,
        *,
        registry: Registry,
        policy: Policy,
        proposer: Proposer,
        executor: Executor,
        workspace: Workspace,
        approvals: ApprovalGate,
        store: Store,
        artifacts: ArtifactStore,
        clock: Clock | None = None,
        controls: Controls | None = None,
        config: HarnessConfig | None = None,
        policies: PolicySource | None = None,
    ) -> None:
        self.state = state
        self.registry = registry
        self.policy = policy
        self.proposer = proposer
        self.executor = executor
        self.workspace = workspace
        self.approvals = approvals
        self.store = store
        self.artifacts = artifacts
        self.clock = clock or SystemClock()
        self.controls = controls or NoControls()
        self.config = config or HarnessConfig()
        self.policies = policies
        self._events: list[ev.Event] = []
        self._wait_just_ended = 0.0
        finish = registry.get(FINISH)
        if finish is None:
            raise ValueError("the registry has no finish tool")
        self._finish_spec = finish

    # -- recording ---------------------------------------------------------------

    def _emit(self, cls: type[ev.Event], call_id: str | None = None, **fields: Any) -> None:
        event = cls(run_id=self.state.run_id, seq=self.state.next_seq, ts=self.clock.now(), call_id=call_id, **fields)
        self.state.next_seq += 1
        self._events.append(event)

    def _checkpoint(self) -> None:
        self.state.proposer_state = self.proposer.snapshot()
        events, self._events = self._events, []
        self.store.checkpoint(self.state, events)
        self._prune_ledger()

    def _prune_ledger(self) -> None:
        """Settled calls were just checkpointed with their final state; keep only the
        report's summary of them."""
        state = self.state
        for call_id, record in list(state.ledger.items()):
            if record.state not in TERMINAL_STATES or call_id == state.current_call:
                continue
            if record.state == "failed":
                state.not_performed.append({"call_id": call_id, "tool": record.tool, "state": record.state})
            del state.ledger[call_id]

    def _emit_model_notes(self) -> None:
        for note in self.proposer.notes():
            kind = str(note.get("kind", "note"))
            self._emit(ev.ModelNote, call_id=self.state.current_call, kind=kind, detail={k: v for k, v in note.items() if k != "kind"})

    def _end_step(self, feedback: dict[str, JSON]) -> None:
        self.state.feedback = feedback
        self.state.current_call = None
        self.state.current_proposal = None
        self._checkpoint()

    # -- driving -----------------------------------------------------------------

    def run(self) -> RunState:
        """Advance until the run waits for approval or stops."""
        if self.state.finished:
            return self.state
        try:
            if self.state.next_seq == 1:
                self._emit(
                    ev.RunStarted,
                    task_id=self.state.contract.task_id,
                    policy_version=self.state.policy_version,
                    revision=self.state.revision,
                    limits=self.state.limits.model_dump(),
                    clipped=self.state.contract.limits.clipped_by(self.policy.budget),
                    tools=sorted(self.state.contract.allowed_tools),
                )
                self._checkpoint()
            self._end_wait_clock()
            self._adopt_policy(self.policy)
            self._refresh_policy()
            self._recover_in_flight()
            # Whatever happened while nobody drove this run (hours, for a wait), the
            # workspace is read in full before any approval or evidence is relied on
            # again: a change that came around the harness's tools stops the run.
            self._set_revision(self.workspace.verify(), cleared_by_write=False)
            if self.state.status == "waiting_approval":
                self._resume_waiting()
            while self.state.status == "running":
                self._step()
        except _Stop as stop:
            self._stop(stop.reason, stop.message)
        except RevisionMismatch as exc:
            self._stop("revision_mismatch", str(exc))
        return self.state

    def _guard(self, where: str, infrastructure: str | None = None) -> None:
        if self.controls.kill_requested():
            raise _Stop("killed", f"kill switch ({where})")
        if self.clock.now() >= self.state.deadline:
            message = f"wall-time limit of {self.state.limits.wall_time_seconds}s reached ({where})"
            raise _no_retry("deadline", message, infrastructure)

    def _stop(self, reason: str, message: str) -> None:
        state = self.state
        if state.waiting is not None:
            self._emit_wait_ended("cancelled", message)
        state.status = "stopped"
        state.stop_reason = reason
        state.stop_message = message
        state.waiting = None
        state.waiting_since = None
        self._emit(ev.Stopped, call_id=state.current_call, status=reason, message=message)
        state.current_call = None
        state.current_proposal = None
        self._checkpoint()
        self._close_requests(f"the run stopped: {reason}")

    def _close_requests(self, reason: str) -> None:
        """A run that ended leaves nothing in the reviewers' queue (DESIGN section 6:
        a pending request belongs to a waiting run). The gate records each
        cancellation; this runs after the final checkpoint, so a crash in between
        leaves it to the sweep."""
        self.approvals.cancel_open(self.state.run_id, reason)

    # -- policy and time -------------------------------------------------------------

    def _adopt_policy(self, policy: Policy) -> None:
        """Gates decide under the policy now in force; the change is on the record."""
        self.policy = policy
        if policy.version != self.state.policy_version:
            self._emit(ev.PolicyChanged, old_version=self.state.policy_version, new_version=policy.version)
            self.state.policy_version = policy.version

    def _refresh_policy(self) -> None:
        if self.policies is not None:
            self._adopt_policy(self.policies.current())

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

    def _step(self) -> None:
        state = self.state
        if state.current_call is None:
            self._refresh_policy()
            self._guard("before asking the model")
            if not self._proposal_budget_left():
                raise _Stop("budget_exhausted", f"proposal budget of {state.limits.max_proposals} used")
            self._reconcile_pending()
            try:
                raw = self.proposer.propose(state.feedback)
            except ProposerStopped as exc:
                self._emit_model_notes()
                raise _Stop(exc.reason, exc.message) from None
            self._emit_model_notes()
            if raw is None:
                raise _Stop("proposals_exhausted", "the proposer has no further proposals")
            state.proposals += 1
            state.current_call = f"c{state.next_call}"
            state.next_call += 1
            state.current_proposal = as_json(raw)
            self._emit(ev.Proposed, call_id=state.current_call, number=state.proposals, proposal=state.current_proposal)
            self._checkpoint()
        self._guard("after the proposal arrived")
        self._process(state.current_call, state.current_proposal)

    # -- gates 1-3: parse, resolve, validate -----------------------------------

    def _invalid(self, call_id: str, gate: str, problems: list[FieldProblem]) -> None:
        listed = [{"field": p.field, "message": p.message} for p in problems]
        self._emit(ev.InvalidInput, call_id=call_id, gate=gate, problems=listed)
        self._end_step({"kind": "invalid_input", "call_id": call_id, "problems": listed})

    def _process(self, call_id: str, raw: JSON) -> None:
        if not isinstance(raw, dict):
            return self._invalid(call_id, "parse", [FieldProblem("(root)", "a proposal must be an object {tool, args}")])
        parse_problems = [
            FieldProblem(name, "unexpected field (a proposal is exactly {tool, args})") for name in raw if name not in ("tool", "args")
        ]
        if not isinstance(raw.get("tool"), str):
            parse_problems.append(FieldProblem("tool", "required, must be a string"))
        if not isinstance(raw.get("args"), dict):
            parse_problems.append(FieldProblem("args", "required, must be an object"))
        if parse_problems:
            return self._invalid(call_id, "parse", parse_problems)
        tool: str = raw["tool"]
        args: dict[str, JSON] = raw["args"]
        if tool == FINISH:
            return self._finish(call_id, args)
        spec = self.registry.get(tool)
        if spec is None:
            return self._invalid(call_id, "resolve", [FieldProblem("tool", f"unknown tool {tool!r}")])
        if tool not in self.state.contract.allowed_tools:
            self._emit(ev.Denied, call_id=call_id, tool=tool, rule="contract", reason="tool not in the contract's allowed_tools")
            raise _Stop("tool_denied", f"{tool} is not allowed for this run")
        try:
            clean = self._validate(spec, args)
            if tool == RUN_CHECK and self.policy.check(clean["check_id"]) is None:
                raise InputError("arguments", [FieldProblem("args.check_id", f"unknown check {clean['check_id']!r}")])
            looked_up = self._key_to_look_up(spec, clean)
        except InputError as exc:
            return self._invalid(call_id, "validate", exc.problems)
        record = CallRecord(call_id=call_id, tool=tool, args=clean, state="validated", idempotency_key=looked_up)
        self.state.ledger[call_id] = record
        self._admit(record, spec)

    def _finish(self, call_id: str, args: dict[str, JSON]) -> None:
        try:
            self.registry.validate(self._finish_spec, args, ())
        except InputError as exc:
            return self._invalid(call_id, "validate", exc.problems)
        pending = self._blocking_effects()
        if pending:
            raise _Stop("unresolved", f"finish with {len(pending)} pending effect(s) of unknown outcome")
        # "Complete" vouches for the evidence on the current revision, so the tree is
        # read in full once more: checks are not walked after (they see it read-only),
        # and a change that came around the harness's tools must stop the run here.
        self._set_revision(self.workspace.verify(), cleared_by_write=False)
        missing = self._missing_evidence()
        if missing:
            self._emit(ev.CheckRequired, call_id=call_id, revision=self.state.revision, missing=missing, for_tool=FINISH)
            return self._end_step({"kind": "check_required", "call_id": call_id, "revision": self.state.revision, "missing": missing})
        self.state.ledger[call_id] = CallRecord(call_id=call_id, tool=FINISH, args=args, state="completed")
        self.state.status = "complete"
        self._emit(ev.Stopped, call_id=call_id, status="complete", message="finished with passing checks on the current revision")
        self._end_step({"kind": "complete", "call_id": call_id})
        self._close_requests("the run completed")

    def _key_to_look_up(self, spec: ToolSpec, args: dict[str, JSON]) -> str | None:
        """A lookup needs no internal key from the model: without one it looks up this
        run's effect of that tool, the unresolved one first, else the latest (at the
        current revision if there is one)."""
        if spec.looks_up is None:
            return None
        given = args.get("idempotency_key")
        if isinstance(given, str):
            return given
        state = self.state
        unresolved = [p.idempotency_key for p in state.unresolved_effects() if p.tool == spec.looks_up and p.idempotency_key]
        if unresolved:
            return unresolved[-1]
        done = [op for op in state.operations.values() if op.tool == spec.looks_up]
        chosen = [op for op in done if op.revision == state.revision] or done
        if not chosen:
            raise InputError("arguments", [FieldProblem("args.idempotency_key", f"this run has no {spec.looks_up} to look up; give a key")])
        return chosen[-1].key

    # -- gates 4-6: authorize, evidence, approval --------------------------------

    def _admit(self, record: CallRecord, spec: ToolSpec) -> None:
        call_id = record.call_id
        auth = self._authorize(spec, record.args)
        record.decision, record.rule, record.policy_version = auth.decision, auth.rule, self.policy.version
        if auth.decision == "deny":
            record.state = "failed"
            self._emit(
                ev.Denied,
                call_id=call_id,
                tool=spec.name,
                rule=auth.rule,
                reason="policy denies this call",
                policy_version=self.policy.version,
            )
            raise _Stop("tool_denied", f"policy denies {spec.name} ({auth.rule})")
        if spec.external_effect:
            record.idempotency_key = operation_key(self.state.run_id, spec.name, record.args, self.state.revision)
            done = self._already_done(record)
            if done is not None:
                return self._duplicate(record, spec, done)
        pending = self._blocking_effects()
        if pending and spec.has_effect:
            record.state = "failed"
            keys = [p.call_id for p in pending]
            self._emit(ev.WriteBlocked, call_id=call_id, tool=spec.name, pending=keys)
            return self._end_step({"kind": "write_blocked", "call_id": call_id, "pending": [p.model_dump() for p in pending]})
        missing = self._missing_evidence() if spec.needs_evidence or auth.requires_evidence else []
        if missing:
            record.state = "failed"
            self._emit(ev.CheckRequired, call_id=call_id, revision=self.state.revision, missing=missing, for_tool=spec.name)
            return self._end_step({"kind": "check_required", "call_id": call_id, "revision": self.state.revision, "missing": missing})
        if auth.decision == "ask" and record.granted_key != self._approval_key(record):
            # No effect without a consumed grant for exactly this tool, these arguments,
            # this revision and this policy version.
            return self._ask(record, spec, auth)
        record.state = "allowed"
        self._emit(
            ev.CallAdmitted,
            call_id=call_id,
            tool=spec.name,
            tool_version=spec.version,
            args=record.args,
            decision=auth.decision,
            rule=auth.rule,
            revision=self.state.revision,
            policy_version=self.policy.version,
        )
        self._execute(record, spec)

    def _duplicate(self, record: CallRecord, spec: ToolSpec, done: Operation) -> None:
        """The same effect again: nothing is performed, nobody is asked, and the
        proposer gets the first outcome."""
        record.state = "completed"
        record.last_status = "duplicate"
        self.state.not_performed.append({"call_id": record.call_id, "tool": spec.name, "state": "duplicate", "of_call": done.call_id})
        self._emit(
            ev.DuplicateEffect, call_id=record.call_id, tool=spec.name, idempotency_key=done.key, of_call=done.call_id, status=done.status
        )
        self._end_step(
            {
                "kind": "duplicate",
                "call_id": record.call_id,
                "tool": spec.name,
                "of_call": done.call_id,
                "idempotency_key": done.key,
                "status": done.status,
                "first_outcome": done.outcome,
            }
        )

    def _approval_key(self, record: CallRecord) -> str:
        return approval_key(record.tool, record.args, self.state.revision, self.policy.version)

    def _ask(self, record: CallRecord, spec: ToolSpec, auth: Authorization) -> None:
        """File (or find) the request for exactly this call and wait for it."""
        state = self.state
        wait_left = self._wait_left()
        # A reviewer is never offered a grant the run could not use.
        if wait_left <= 0:
            record.state = "failed"
            raise _Stop("approval_expired", f"the policy's limit of {self.policy.max_wait_seconds}s on waiting for reviewers is used up")
        if state.calls >= state.limits.max_tool_calls:
            record.state = "failed"
            raise _Stop("budget_exhausted", f"call budget of {state.limits.max_tool_calls} used: a grant could not be used")
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
        }
        ask = ApprovalAsk(
            run_id=state.run_id,
            call_id=record.call_id,
            actor=state.actor,
            diff=self.workspace.preview(spec.name, record.args) if spec.has_effect else None,
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
        """Decide how the wait ends (runs.core.lifecycle.WAIT_EXITS), or that it goes on."""
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

    def _emit_wait_ended(self, exit: WaitExit, reason: str) -> None:
        state = self.state
        assert state.waiting is not None
        self._emit(
            ev.WaitEnded,
            call_id=state.waiting.call_id,
            request_id=state.waiting.request_id,
            exit=exit,
            run=WAIT_EXITS[exit].run,
            reason=reason,
            waited_seconds=round(self._wait_just_ended, 3),
            total_waited_seconds=round(state.waited_seconds, 3),
        )

    def _leave_wait(self, exit: WaitExit, reason: str, record: CallRecord, spec: ToolSpec) -> None:
        state = self.state
        waiting = state.waiting
        assert waiting is not None
        transition = WAIT_EXITS[exit]
        self._emit_wait_ended(exit, reason)
        state.waiting = None
        state.status = "running"
        if exit == "granted":
            record.granted_key = waiting.approval_key
            self._emit(ev.ApprovalConsumed, call_id=record.call_id, key=waiting.approval_key, request_id=waiting.request_id)
            return self._admit(record, spec)
        if transition.run == "stopped":
            record.state = "failed"
            if exit == "denied":
                self._emit(
                    ev.ApprovalRefused, call_id=record.call_id, key=waiting.approval_key, request_id=waiting.request_id, reason=reason
                )
                raise _Stop("denied", f"approval denied: {reason}")
            raise _Stop(transition.outcome or CANCELLED_OUTCOME, f"approval {exit}: {reason}")
        # Stale: the call goes back through the gates at the current revision and
        # under the current policy; the run goes on.
        record.approval_key = None
        self._admit(record, spec)

    # -- gates 7-9: execute, receipt check, observe -----------------------------

    def _execute(self, record: CallRecord, spec: ToolSpec) -> None:
        state = self.state
        check = self.policy.check(str(record.args["check_id"])) if spec.name == RUN_CHECK else None
        if spec.external_effect:
            assert record.idempotency_key is not None
            # Part of the intent checkpointed below: a crash during the call leaves the
            # operation known, so the same effect is never performed twice.
            state.operations[record.idempotency_key] = Operation(
                key=record.idempotency_key, tool=spec.name, args=record.args, revision=state.revision, call_id=record.call_id
            )
        while True:
            self._guard("before an attempt")
            if not self._attempts_left(record):
                raise _Stop("attempt_limit", f"{record.call_id} used its {state.limits.max_attempts} attempts")
            if state.calls >= state.limits.max_tool_calls:
                raise _Stop("budget_exhausted", f"call budget of {state.limits.max_tool_calls} used")
            record.attempts += 1
            state.calls += 1
            record.state = "started"
            record.revision_before = state.revision
            self._emit(
                ev.CallStarted, call_id=record.call_id, tool=spec.name, attempt=record.attempts, idempotency_key=record.idempotency_key
            )
            # Write intent is durable before the effect can happen, so a crash during
            # the call is found as "started" and reconciled instead of forgotten. A
            # read needs no such record: after a crash it is simply done again.
            if spec.has_effect or spec.runs_untrusted_code:
                self._checkpoint()
            call = Call(
                run_id=state.run_id,
                call_id=record.call_id,
                tool=spec.name,
                tool_version=spec.version,
                args=record.args,
                attempt=record.attempts,
                idempotency_key=record.idempotency_key,
                max_output_bytes=state.limits.max_output_bytes_per_call,
                check=check,
                deadline=state.deadline,
            )
            try:
                raw: object = self.executor.execute(call)
            except RevisionMismatch:
                raise
            except Exception as exc:  # noqa: BLE001 - an executor crash is a missing receipt, not a worker crash
                raw = None
                problem_detail = f"executor raised {type(exc).__name__}: {exc}"
            else:
                problem_detail = ""
            harness_revision = self.workspace.revision() if spec.may_change_workspace else state.revision
            try:
                receipt = self._check_receipt(raw, record, spec, harness_revision)
            except ReceiptInvalid as exc:
                problem = f"{exc} ({problem_detail})" if problem_detail else str(exc)
                self._emit(
                    ev.ReceiptRecorded,
                    call_id=record.call_id,
                    tool=spec.name,
                    attempt=record.attempts,
                    valid=False,
                    problem=problem,
                    receipt=as_json(raw),
                    harness_revision=harness_revision,
                )
                if spec.has_effect:
                    self._record_pending(record, spec, f"receipt invalid: {problem}")
                else:
                    record.state = "failed"
                self._set_revision(harness_revision, cleared_by_write=spec.writes)
                raise _Stop("receipt_invalid", problem) from None
            self._emit(
                ev.ReceiptRecorded,
                call_id=record.call_id,
                tool=spec.name,
                attempt=record.attempts,
                valid=True,
                receipt=receipt.model_dump(),
                harness_revision=harness_revision,
            )
            record.last_status = receipt.status
            if receipt.status != "transient":
                feedback = self._settle(record, spec, receipt, check)
                self._settle_operation(record, receipt, feedback)
                self._guard("after the receipt")
                return self._end_step(feedback)
            infrastructure = self._infrastructure_failure(receipt)
            error = receipt.data.get("error")
            record.transient_reasons.append(infrastructure or (error if isinstance(error, str) else "transient failure"))
            self._guard("after the receipt", infrastructure)
            backoff = min(self.config.retry_base_seconds * 2 ** (record.attempts - 1), self.config.retry_max_seconds)
            if not self._attempts_left(record):
                raise _no_retry("attempt_limit", f"{record.call_id} failed transiently {record.attempts} times", infrastructure)
            if self.clock.now() + backoff >= state.deadline:
                raise _no_retry("deadline", f"a retry after {backoff:.2f}s backoff would cross the deadline", infrastructure)
            record.state = "allowed"
            reason = f"the sandbox failed, not the call (no effect): {infrastructure}" if infrastructure else "transient failure, no effect"
            self._emit(ev.Retry, call_id=record.call_id, attempt=record.attempts, backoff_seconds=backoff, reason=reason)
            self._checkpoint()
            self.clock.sleep(backoff)

    def _settle(self, record: CallRecord, spec: ToolSpec, receipt: Receipt, check: CheckDef | None) -> dict[str, JSON]:
        state = self.state
        if receipt.status == "unknown":
            if spec.has_effect:
                self._record_pending(record, spec, "the executor could not tell whether the effect happened")
            else:
                record.state = "unknown"
            self._set_revision(receipt.revision, cleared_by_write=spec.writes)
            return {
                "kind": "outcome_unknown",
                "call_id": record.call_id,
                "tool": spec.name,
                "idempotency_key": record.idempotency_key,
                "data": self._observe(receipt.data),
            }
        record.state = "completed"
        wrote = spec.writes and receipt.effect != "none"
        if wrote:
            self._note_written(record)
        self._set_revision(receipt.revision, cleared_by_write=wrote)
        if spec.external_effect and receipt.effect == "applied":
            state.effects_applied.append(record.call_id)
        if check is not None:
            self._record_evidence(record, receipt, check)
        feedback: dict[str, JSON] = {
            "kind": "result",
            "call_id": record.call_id,
            "tool": spec.name,
            "revision": state.revision,
            "data": self._observe(receipt.data),
            "artifacts": list(receipt.artifacts),
        }
        if record.transient_reasons:
            feedback["earlier_attempts"] = list(record.transient_reasons)
        return feedback

    def _settle_operation(self, record: CallRecord, receipt: Receipt, feedback: dict[str, JSON]) -> None:
        operation = self.state.operations.get(record.idempotency_key or "")
        if operation is None or operation.call_id != record.call_id:
            return
        if receipt.status == "unknown":
            operation.status = "unknown"
        else:
            operation.status = "applied" if receipt.effect == "applied" else "not_applied"
        operation.outcome = feedback

    def _observe(self, data: dict[str, JSON]) -> dict[str, JSON]:
        """What the proposer sees: the data, or a bounded summary plus an artifact ref."""
        text = canonical_json(data)
        cap = self.state.limits.max_output_bytes_per_call
        encoded = text.encode("utf-8")
        if len(encoded) <= cap:
            return data
        ref = self.artifacts.put(encoded, "application/json")
        head = encoded[: min(cap, 4000)].decode("utf-8", errors="ignore")
        return {"truncated": True, "size": len(encoded), "artifact": ref, "head": head}

    def _note_written(self, record: CallRecord) -> None:
        paths = patch_targets(str(record.args["patch"])) if "patch" in record.args else [str(record.args.get("path"))]
        self.state.changed_paths = sorted(set(self.state.changed_paths) | set(paths))

    def _set_revision(self, revision: str, *, cleared_by_write: bool) -> None:
        state = self.state
        if revision == state.revision and not cleared_by_write:
            return
        if state.current_evidence:
            self._emit(ev.EvidenceCleared, old_revision=state.revision, revision=revision, checks=sorted(state.current_evidence))
        state.current_evidence = {}
        state.revision = revision

    def _record_evidence(self, record: CallRecord, receipt: Receipt, check: CheckDef) -> None:
        state = self.state
        data = receipt.data
        exit_code = data.get("exit_code")
        exit_code = exit_code if isinstance(exit_code, int) and not isinstance(exit_code, bool) else None
        timed_out = data.get("timed_out") is True
        before = record.revision_before or state.revision
        evidence = EvidenceRecord(
            call_id=record.call_id,
            check_id=check.check_id,
            check_version=check.version,
            command=list(check.command),
            exit_code=exit_code,
            timed_out=timed_out,
            duration_ms=_int(data.get("duration_ms")),
            image_digest=str(data.get("image_digest", "")),
            revision=before,
            policy_version=state.policy_version,
            output_ref=_str_or_none(data.get("output_ref")),
            passed=exit_code == 0 and not timed_out,
            ts=self.clock.now(),
        )
        state.evidence.append(evidence)
        # Evidence is current only if the check left the revision it checked intact.
        current = before == state.revision
        if current:
            state.current_evidence[check.check_id] = len(state.evidence) - 1
        self._emit(
            ev.EvidenceRecorded,
            call_id=record.call_id,
            check_id=check.check_id,
            check_version=check.version,
            passed=evidence.passed,
            exit_code=exit_code,
            revision=before,
            current=current,
        )

    # -- the controls, one method each so a test can show each is load-bearing --

    def _proposal_budget_left(self) -> bool:
        return self.state.proposals < self.state.limits.max_proposals

    def _validate(self, spec: ToolSpec, args: dict[str, JSON]) -> dict[str, JSON]:
        return self.registry.validate(spec, args, self.state.contract.allowed_write_paths)

    def _authorize(self, spec: ToolSpec, args: Mapping[str, JSON]) -> Authorization:
        return authorize(self.policy, spec.name, args)

    def _missing_evidence(self) -> list[str]:
        return self.state.missing_checks()

    def _blocking_effects(self) -> list[PendingEffect]:
        return self.state.unresolved_effects()

    def _already_done(self, record: CallRecord) -> Operation | None:
        """The same external effect applied, under way or of unknown outcome (only one
        known not to have happened may be performed again)."""
        done = self.state.operations.get(record.idempotency_key or "")
        if done is None or done.status == "not_applied" or done.call_id == record.call_id:
            return None
        return done

    def _attempts_left(self, record: CallRecord) -> bool:
        return record.attempts < self.state.limits.max_attempts

    def _infrastructure_failure(self, receipt: Receipt) -> str | None:
        return receipt.infrastructure

    def _check_receipt(self, raw: object, record: CallRecord, spec: ToolSpec, harness_revision: str) -> Receipt:
        return check_receipt(raw, record.call_id, spec.name, harness_revision)

    # -- pending effects and recovery --------------------------------------------

    def _record_pending(self, record: CallRecord, spec: ToolSpec, reason: str) -> None:
        record.state = "unknown"
        kind = "external" if spec.external_effect else "workspace"
        operation = self.state.operations.get(record.idempotency_key or "")
        if operation is not None and operation.call_id == record.call_id:
            operation.status = "unknown"
        if spec.writes:
            self._note_written(record)
        self.state.pending_effects.append(
            PendingEffect(
                call_id=record.call_id,
                tool=spec.name,
                args=record.args,
                kind=kind,
                idempotency_key=record.idempotency_key,
                reason=reason,
                recorded_at=self.clock.now(),
            )
        )
        self._emit(
            ev.PendingEffectRecorded,
            call_id=record.call_id,
            tool=spec.name,
            kind=kind,
            idempotency_key=record.idempotency_key,
            reason=reason,
        )

    def _reconcile_pending(self) -> None:
        changed = False
        for effect in self.state.unresolved_effects():
            try:
                result = self.executor.reconcile(effect)
            except Exception:  # noqa: BLE001, S112 - a failed lookup leaves the outcome unknown, never "failed"
                continue
            if result.conflict:
                raise _Stop("effect_conflict", f"{effect.call_id}: {result.detail}")
            if not result.resolved:
                continue
            changed = True
            effect.resolved = True
            effect.applied = result.applied
            effect.resolution = result.detail
            record = self.state.ledger.get(effect.call_id)
            if record is not None:
                record.state = "completed" if result.applied else "failed"
            if effect.kind == "workspace":
                self._set_revision(self.workspace.revision(), cleared_by_write=bool(result.applied))
            elif result.applied:
                self.state.effects_applied.append(effect.call_id)
            operation = self.state.operations.get(effect.idempotency_key or "")
            if operation is not None and operation.call_id == effect.call_id:
                operation.status = "applied" if result.applied else "not_applied"
                operation.outcome = {"reconciled": result.detail}
            self._emit(ev.EffectReconciled, call_id=effect.call_id, applied=bool(result.applied), detail=result.detail)
        if changed:
            self._checkpoint()

    def _recover_in_flight(self) -> None:
        """A call still marked 'started' means the previous driver died during it: its
        outcome is unknown until reconciled, whatever the chat history says.

        The call in progress runs again (admitted anew through the gates, against the
        re-read revision, as its next attempt within the attempts, the call budget
        and the deadline) when it cannot have had an effect: a check, or a workspace
        write that provably did not happen because the workspace is still at the
        revision it had before the call. Anything else becomes a pending effect."""
        interrupted = [r for r in self.state.ledger.values() if r.state == "started"]
        if not interrupted:
            return
        revision = self.workspace.revision()
        again: tuple[CallRecord, ToolSpec] | None = None
        for record in interrupted:
            spec = self.registry.get(record.tool)
            self._emit(ev.RunResumed, call_id=record.call_id, reason=f"recovered: {record.tool} attempt {record.attempts} was in flight")
            current = record.call_id == self.state.current_call
            unwritten = spec is not None and spec.writes and not spec.external_effect and revision == record.revision_before
            if spec is not None and current and (not spec.has_effect or unwritten):
                if unwritten:
                    detail = "the workspace is at the revision it had before the call: the write did not happen"
                    self._emit(ev.EffectReconciled, call_id=record.call_id, applied=False, detail=detail)
                record.state = "validated"
                again = (record, spec)
                continue
            if spec is not None and spec.has_effect:
                self._record_pending(record, spec, "the worker stopped during the call")
            else:
                record.state = "failed"
            self.state.feedback = {"kind": "interrupted", "call_id": record.call_id, "tool": record.tool}
        if again is None:
            self.state.current_call = None
            self.state.current_proposal = None
        self._set_revision(revision, cleared_by_write=False)
        self._checkpoint()
        self._reconcile_pending()
        if again is not None:
            record, spec = again
            reason = "interrupted: the worker stopped during the attempt"
            self._emit(ev.Retry, call_id=record.call_id, attempt=record.attempts, backoff_seconds=0.0, reason=reason)
            self._guard("before retrying an interrupted call")
            self._admit(record, spec)


def _no_retry(reason: str, message: str, infrastructure: str | None) -> _Stop:
    """The stop when a transient failure cannot be retried: when the sandbox's own
    infrastructure kept failing, the outcome names it rather than the limit that
    ended the retries (the call itself never failed)."""
    if infrastructure is None:
        return _Stop(reason, message)
    return _Stop("sandbox_unavailable", f"the sandbox kept failing ({infrastructure}); {message}")


def _int(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _str_or_none(value: object) -> str | None:
    return value if isinstance(value, str) else None
