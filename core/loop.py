"""The agent loop: each proposal passes the gates (docs/design.md, Gates) in order, every
outcome is an event, and the state is checkpointed after every step so a run
loaded from the store continues exactly where it stopped.

``Harness`` drives a run and holds gates 1-7 (parse, resolve, validate, authorize,
effects already known, evidence, approval); gates 8-10 (execute, receipt check,
observe), evidence, pending effects and recovery are in ``core.execution``; waiting for reviewers in
``core.waits``; recording, stops and the controls in ``core.driver``."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from core import events as ev
from core import feedback as fb
from core import storable
from core.contract import Contract
from core.driver import HarnessConfig, Stop
from core.effects import Plan
from core.errors import FieldProblem, InputError
from core.execution import Execution
from core.jsonutil import JSON, digest
from core.policy import Policy
from core.ports import (
    ApprovalGate,
    ArtifactStore,
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
from core.state import CallRecord, Operation, RunState
from core.tools import Registry, ToolSpec
from core.waits import Waits

__all__ = ["Harness", "HarnessConfig", "new_state", "operation_key"]

# The largest proposal taken, as UTF-8 JSON: room for the largest file a write may
# carry (5,000,000 characters), not for anything without bound.
MAX_PROPOSAL_BYTES = 24 * 2**20
# What a refusal keeps of each problem, and how many problems it lists: the field
# names and messages of a refused proposal can quote the proposal itself.
PROBLEM_CHARS = 300


def operation_key(run_id: str, tool: str, args: Mapping[str, JSON], revision: str) -> str:
    """The idempotency key of an external effect: what the effect is, never which call
    asked for it, so the same effect proposed again is found (docs/design.md, Approvals)."""
    return digest({"run": run_id, "tool": tool, "args": dict(args), "revision": revision})[:32]


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


@dataclass(frozen=True)
class Refused:
    """A proposal gates 1-3 (parse, resolve, validate) refuse: ``invalid_input`` at ``gate``."""

    gate: str
    problems: list[FieldProblem]


@dataclass(frozen=True)
class Gated:
    """A proposal through gates 1-3 (parse, resolve, validate): the tool, and its arguments as validated (as
    given, for a tool the contract does not allow: it stops the run unread)."""

    spec: ToolSpec
    args: dict[str, JSON]
    in_contract: bool = True
    looked_up: str | None = None


def _bounded(problems: list[FieldProblem]) -> list[FieldProblem]:
    """At most ``storable.MAX_PROBLEMS`` problems, each clipped: what a refusal stores
    and feeds back stays small whatever the proposal held."""

    def clip(text: str) -> str:
        return text if len(text) <= PROBLEM_CHARS else text[:PROBLEM_CHARS] + "..."

    kept = [FieldProblem(clip(p.field), clip(p.message)) for p in problems[: storable.MAX_PROBLEMS]]
    if len(problems) > len(kept):
        kept.append(FieldProblem("(root)", f"and {len(problems) - len(kept)} more problems"))
    return kept


class Harness(Waits, Execution):
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
        registry.finish()  # a registry without exactly one finishing tool is refused here, not mid-run

    # -- driving -----------------------------------------------------------------

    def run(self) -> RunState:
        """Advance until the run waits for approval or stops."""
        if self.state.finished:
            return self.state
        try:
            if not self.state.run_started:
                self.state.run_started = True
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
        except Stop as stop:
            self._stop(stop.reason, stop.message)
        except RevisionMismatch as exc:
            self._stop("revision_mismatch", str(exc))
        return self.state

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

    def _step(self) -> None:
        state = self.state
        if state.current_call is None:
            self._refresh_policy()
            self._guard("before asking the model")
            if not self._proposal_budget_left():
                raise Stop("budget_exhausted", f"proposal budget of {state.limits.max_proposals} used")
            self._reconcile_pending()
            try:
                raw = self.proposer.propose(None if state.feedback is None else fb.feedback_from_json(state.feedback))
            except ProposerStopped as exc:
                self._emit_model_notes()
                raise Stop(exc.reason, exc.message) from None
            self._emit_model_notes()
            if raw is None:
                raise Stop("proposals_exhausted", "the proposer has no further proposals")
            state.proposals += 1
            state.current_call = call_id = f"c{state.next_call}"
            state.next_call += 1
            state.proposed_at = self.clock.now()
            # Gates 1-3 (parse, resolve, validate) read nothing outside the run, so they decide before anything
            # holding the proposal is stored: only a proposal they let through is kept
            # whole (the state holds it until its step ends, for a resumed run);
            # anything else is kept bounded (Proposed.summary), whatever its size.
            gated = self._gate(raw)
            self._emit(ev.Proposed, call_id=call_id, number=state.proposals, **self._kept(raw, gated))
            if isinstance(gated, Gated):
                state.current_proposal = raw
                self._checkpoint()
        else:
            # A resumed run: its proposal passed these gates before; they decide
            # again, under the policy now in force.
            call_id = state.current_call
            gated = self._gate(state.current_proposal)
        self._guard("after the proposal arrived")
        if isinstance(gated, Refused):
            return self._invalid(call_id, gated.gate, gated.problems)
        self._process(call_id, gated)

    # -- gates 1-3: parse, resolve, validate -----------------------------------

    def _kept(self, raw: object, gated: Refused | Gated) -> dict[str, JSON]:
        """The Proposed event's fields for what is kept of a proposal: the proposal
        itself, or, for one refused (by gates 1-3, parse, resolve, validate, or the contract) that is large or
        not storable, its size, digest and head."""
        if isinstance(gated, Gated) and gated.in_contract:
            return {"proposal": raw}
        found = storable.summary(raw)
        if found.bytes <= storable.HEAD_CHARS and not storable.problems(raw):
            return {"proposal": raw}
        return {"proposal": None, "summary": found.model_dump()}

    def _invalid(self, call_id: str, gate: str, problems: list[FieldProblem]) -> None:
        problems = _bounded(problems)
        listed = [{"field": p.field, "message": p.message} for p in problems]
        self._emit(ev.InvalidInput, call_id=call_id, gate=gate, problems=listed)
        self._end_step(fb.InvalidInput(call_id=call_id, problems=[fb.Problem(field=p.field, message=p.message) for p in problems]))

    def _gate(self, raw: object) -> Refused | Gated:
        """Gates 1-3 (parse, resolve, validate; and the contract's list of tools), deciding without acting."""
        unfit = storable.problems(raw, max_bytes=MAX_PROPOSAL_BYTES)
        if unfit:
            return Refused("parse", unfit)
        if not isinstance(raw, dict):
            return Refused("parse", [FieldProblem("(root)", "a proposal must be an object {tool, args}")])
        parse_problems = [
            FieldProblem(name, "unexpected field (a proposal is exactly {tool, args})") for name in raw if name not in ("tool", "args")
        ]
        if not isinstance(raw.get("tool"), str):
            parse_problems.append(FieldProblem("tool", "required, must be a string"))
        if not isinstance(raw.get("args"), dict):
            parse_problems.append(FieldProblem("args", "required, must be an object"))
        if parse_problems:
            return Refused("parse", parse_problems)
        tool: str = raw["tool"]
        args: dict[str, JSON] = raw["args"]
        spec = self.registry.get(tool)
        if spec is None:
            return Refused("resolve", [FieldProblem("tool", f"unknown tool {tool!r}")])
        if spec.finishes:
            try:
                self.registry.validate(spec, args, ())
            except InputError as exc:
                return Refused("validate", exc.problems)
            return Gated(spec, args)
        if tool not in self.state.contract.allowed_tools:
            return Gated(spec, args, in_contract=False)
        try:
            clean = self._validate(spec, args)
            if spec.runs_check is not None and self.policy.check(clean[spec.runs_check]) is None:
                raise InputError("arguments", [FieldProblem(f"args.{spec.runs_check}", f"unknown check {clean[spec.runs_check]!r}")])
            looked_up = self._key_to_look_up(spec, clean)
        except InputError as exc:
            return Refused("validate", exc.problems)
        return Gated(spec, clean, looked_up=looked_up)

    def _process(self, call_id: str, gated: Gated) -> None:
        spec = gated.spec
        if spec.finishes:
            return self._finish(call_id, spec, gated.args)
        if not gated.in_contract:
            self._emit(ev.Denied, call_id=call_id, tool=spec.name, rule="contract", reason="tool not in the contract's allowed_tools")
            raise Stop("tool_denied", f"{spec.name} is not allowed for this run")
        record = CallRecord(call_id=call_id, tool=spec.name, args=gated.args, state="validated", idempotency_key=gated.looked_up)
        self.state.ledger[call_id] = record
        self._admit(record, spec)

    def _finish(self, call_id: str, spec: ToolSpec, args: dict[str, JSON]) -> None:
        pending = self._blocking_effects()
        if pending:
            raise Stop("unresolved", f"finish with {len(pending)} pending effect(s) of unknown outcome")
        # "Complete" vouches for the evidence on the current revision, so the tree is
        # read in full once more: checks are not walked after (they see it read-only),
        # and a change that came around the harness's tools must stop the run here.
        self._set_revision(self.workspace.verify(), cleared_by_write=False)
        missing = self._missing_evidence()
        if missing:
            self._emit(ev.CheckRequired, call_id=call_id, revision=self.state.revision, missing=missing, for_tool=spec.name)
            return self._end_step(fb.CheckRequired(call_id=call_id, revision=self.state.revision, missing=missing))
        self.state.ledger[call_id] = CallRecord(call_id=call_id, tool=spec.name, args=args, state="completed")
        self.state.status = "complete"
        self._emit(ev.Stopped, call_id=call_id, status="complete", message="finished with passing checks on the current revision")
        self._end_step(fb.Complete(call_id=call_id))
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

    # -- gates 4-7: authorize, effects already known, evidence, approval ---------

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
            raise Stop("tool_denied", f"policy denies {spec.name} ({auth.rule})")
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
            return self._end_step(fb.WriteBlocked(call_id=call_id, pending=pending))
        missing = self._missing_evidence() if spec.needs_evidence or auth.requires_evidence else []
        if missing:
            record.state = "failed"
            self._emit(ev.CheckRequired, call_id=call_id, revision=self.state.revision, missing=missing, for_tool=spec.name)
            return self._end_step(fb.CheckRequired(call_id=call_id, revision=self.state.revision, missing=missing))
        if auth.decision == "ask" and record.granted_key != self._approval_key(record):
            # No effect without a consumed grant for exactly this tool, these arguments,
            # this revision, this policy version and this fixed effect.
            return self._ask(record, spec, auth, self._fix_effect(record, spec))
        if spec.external_effect and record.effect is None:
            self._fix_effect(record, spec)
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
            effect=record.effect,
        )
        self._execute(record, spec)

    def _fix_effect(self, record: CallRecord, spec: ToolSpec) -> Plan | None:
        """Fix an external call's effect now, from the workspace and this process's
        configuration, dated when its proposal arrived (the same effect again after a
        crash); from here on it is what the request shows, what the key binds and what
        the executor performs, whichever process does (core.effects)."""
        if not spec.external_effect or record.idempotency_key is None:
            return None
        at = self.state.proposed_at if self.state.proposed_at is not None else self.clock.now()
        plan = self.workspace.plan(spec.name, record.args, record.idempotency_key, at)
        record.effect = plan.effect if plan is not None else None
        return plan

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
            fb.Duplicate(
                call_id=record.call_id,
                tool=spec.name,
                of_call=done.call_id,
                idempotency_key=done.key,
                status=done.status,
                first_outcome=done.outcome,
            )
        )
