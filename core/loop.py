"""The agent loop: each proposal passes the gates (docs/design.md, Gates) in order, every
outcome is an event, and the state is checkpointed after every step so a run
loaded from the store continues exactly where it stopped.

The gates decide (``core.proposals``: 1-3, parse, resolve, validate; ``core.admission``:
4-7, authorize, effects already known, evidence, approval); this module chains them and
is the one place their decisions (``core.decisions``) are acted on: a call refused, denied,
blocked, asked for, executed (``core.execution``: 8-10, execute, receipt check, observe)
or sent back through the gates when a wait for it ends (``core.waits``) or a crash
interrupted it (``core.pending``). What every part works on is the run context
(``core.context``); how it is recorded is ``core.recording``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import assert_never

from core import events as ev
from core import feedback as fb
from core import waits
from core.admission import approval, authorize_call, evidence, fix_effect, known_effects, operation_key, unresolved
from core.call_record import CallRecord
from core.context import HarnessConfig, RunContext, StopRun, guard
from core.contract import Contract
from core.decisions import (
    Accepted,
    Ask,
    Blocked,
    ChangesRequested,
    Complete,
    Decision,
    Deny,
    Duplicate,
    Execute,
    KeepWaiting,
    NeedsEvidence,
    Proceed,
    Refuse,
    Regate,
    Stop,
)
from core.effects import Plan
from core.execution import attempts_left, execute, infrastructure_failure, receipt_check
from core.fold import LOG_VERSION
from core.gates import Gates
from core.outcome import FINISHED, said_at_stop
from core.pending import reconcile_pending, recover_in_flight
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
from core.proposals import bounded, kept, parse, resolve, validate
from core.publish_gate import hidden_findings, problems, screen
from core.recording import checkpoint, close_requests, emit, emit_model_notes, read_workspace, stop
from core.state import RunState
from core.tools import Registry, ToolSpec

__all__ = ["GATES", "Harness", "HarnessConfig", "drive", "new_state"]


def proposals_left(state: RunState) -> bool:
    return state.proposals < state.limits.max_proposals


GATES = Gates(
    parse=parse,
    resolve=resolve,
    validate=validate,
    authorize=authorize_call,
    known_effects=known_effects,
    evidence=evidence,
    approval=approval,
    receipt=receipt_check,
    proposals_left=proposals_left,
    attempts_left=attempts_left,
    infrastructure_failure=infrastructure_failure,
)


def new_state(
    *, run_id: str, contract: Contract, policy: Policy, actor: str, revision: str, now: float, caps: Mapping[str, int] | None = None
) -> RunState:
    """A run as created: its limits the contract's, within the policy's budget and
    ``caps`` (its project's bounds on what a run may ask for)."""
    limits = contract.limits.intersect(policy.budget).capped(caps or {})
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
    """A run's context and the gate set it is driven through (``GATES`` unless a test
    switches one off)."""

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
        gates: Gates = GATES,
    ) -> None:
        registry.finish()  # a registry without exactly one finishing tool is refused here, not mid-run
        self.context = RunContext(
            state,
            registry=registry,
            policy=policy,
            proposer=proposer,
            executor=executor,
            workspace=workspace,
            approvals=approvals,
            store=store,
            artifacts=artifacts,
            clock=clock or SystemClock(),
            controls=controls or NoControls(),
            config=config or HarnessConfig(),
            policies=policies,
        )
        self.gates = gates

    def run(self) -> RunState:
        return drive(self.context, self.gates)


def drive(run: RunContext, gates: Gates) -> RunState:
    """Advance until the run waits for approval or stops."""
    state = run.state
    if state.finished:
        return state
    try:
        if not state.run_started:
            emit(
                run,
                ev.RunStarted,
                task_id=state.contract.task_id,
                policy_version=state.policy_version,
                revision=state.revision,
                limits=state.limits.model_dump(),
                clipped=state.contract.limits.clipped_by(state.limits),
                tools=sorted(state.contract.allowed_tools),
                log_version=LOG_VERSION,
            )
            checkpoint(run)
        waits.end_wait_clock(run)
        _adopt_policy(run, run.policy)
        _refresh_policy(run)
        interrupted = recover_in_flight(run)
        if interrupted is not None:
            act(run, gates, interrupted)
        # Whatever happened while nobody drove this run (hours, for a wait), the
        # workspace is read in full before any approval or evidence is relied on
        # again: a change that came around the harness's tools stops the run. A
        # workspace this worker has just made was read (or proven) as it was made.
        read_workspace(run, run.workspace.picked_up())
        if state.status == "waiting_approval":
            act(run, gates, waits.resume(run))
        while state.status == "running":
            _step(run, gates)
    except StopRun as stopped:
        stop(run, stopped.stop.reason, stopped.stop.message, stopped.stop.fails)
    except RevisionMismatch as exc:
        stop(run, "revision_mismatch", str(exc))
    return state


# -- policy -------------------------------------------------------------------------


def _adopt_policy(run: RunContext, policy: Policy) -> None:
    """Gates decide under the policy now in force; the change is on the record."""
    run.policy = policy
    if policy.version != run.state.policy_version:
        emit(run, ev.PolicyChanged, old_version=run.state.policy_version, new_version=policy.version)


def _refresh_policy(run: RunContext) -> None:
    if run.policies is not None:
        _adopt_policy(run, run.policies.current())


# -- one step: a proposal through the gates -----------------------------------------


def _step(run: RunContext, gates: Gates) -> None:
    state = run.state
    if state.current_call is None:
        _refresh_policy(run)
        guard(run, "before asking the model")
        if not gates.proposals_left(state):
            return act(run, gates, Stop("budget_exhausted", f"proposal budget of {state.limits.max_proposals} used"))
        conflict = reconcile_pending(run)
        if conflict is not None:
            return act(run, gates, conflict)
        try:
            raw = run.proposer.propose(None if state.feedback is None else fb.feedback_from_json(state.feedback))
        except ProposerStopped as exc:
            emit_model_notes(run)
            return act(run, gates, Stop(exc.reason, exc.message))
        emit_model_notes(run)
        if raw is None:
            return act(run, gates, Stop("proposals_exhausted", _out_of_proposals(state)))
        call_id = f"c{state.next_call}"
        # Gates 1-3 (parse, resolve, validate) read nothing outside the run, so they decide before anything
        # holding the proposal is stored: only a proposal they let through is kept
        # whole (the state holds it until its step ends, for a resumed run);
        # anything else is kept bounded (Proposed.summary), whatever its size.
        screened = _screen(run, gates, call_id, raw)
        # The proposal's event makes it the call in progress, numbers the next call
        # and dates this one (core.fold).
        accepted = isinstance(screened, Accepted)
        emit(run, ev.Proposed, call_id=call_id, number=state.proposals + 1, accepted=accepted, **kept(raw, screened))
        if accepted:
            checkpoint(run)
    else:
        # A resumed run: its proposal passed these gates before; they decide
        # again, under the policy now in force.
        screened = _screen(run, gates, state.current_call, state.current_proposal)
    guard(run, "after the proposal arrived")
    if not isinstance(screened, Accepted):
        return act(run, gates, screened)
    if screened.spec.finishes:
        return act(run, gates, _finish(run, gates, screened))
    # The gates decide on a working copy of the call's record: what they fill in is on
    # the record once the event that acts on their decision is (core.fold_calls).
    record = CallRecord(
        call_id=screened.call_id, tool=screened.spec.name, args=screened.args, state="validated", idempotency_key=screened.looked_up
    )
    act(run, gates, _admit(run, gates, record, screened.spec))


def _screen(run: RunContext, gates: Gates, call_id: str, raw: object) -> Refuse | Deny | Accepted:
    """Gates 1-3 (parse, resolve, validate; and the contract's list of tools), deciding without acting."""
    parsed = gates.parse(call_id, raw)
    if isinstance(parsed, Refuse):
        return parsed
    resolved = gates.resolve(run, parsed)
    if not isinstance(resolved, Accepted):
        return resolved
    return gates.validate(run, resolved)


def _admit(run: RunContext, gates: Gates, record: CallRecord, spec: ToolSpec) -> Decision:
    """Gates 4-7 (authorize, effects already known, evidence, approval) in order: the
    first that does not let the call through decides; the last admits it or asks."""
    authorized = gates.authorize(run, record, spec)
    if isinstance(authorized, Deny):
        record.decision, record.rule, record.policy_version = "deny", authorized.rule, run.policy.version
        return authorized
    authorization = authorized.authorization
    record.decision, record.rule, record.policy_version = authorization.decision, authorization.rule, run.policy.version
    if spec.external_effect:
        record.idempotency_key = operation_key(run.state.run_id, spec.name, record.args, run.state.revision)
    known = gates.known_effects(run, record, spec)
    if not isinstance(known, Proceed):
        return known
    checked = gates.evidence(run, record, spec, authorization)
    if not isinstance(checked, Proceed):
        return checked
    return gates.approval(run, record, spec, authorization)


def _finish(run: RunContext, gates: Gates, accepted: Accepted) -> Decision:
    """Gates 5-6 (effects already known, evidence) for finish. Its record is kept only
    when the run completes."""
    pending = unresolved(run)
    if not isinstance(pending, Proceed):
        return pending
    # "Complete" vouches for the evidence on the current revision, so the tree is
    # read in full once more: checks are not walked after (they see it read-only),
    # and a change that came around the harness's tools must stop the run here.
    read_workspace(run, run.workspace.verify())
    record = CallRecord(call_id=accepted.call_id, tool=accepted.spec.name, args=accepted.args, state="completed")
    checked = gates.evidence(run, record, accepted.spec, None)
    return Complete(record) if isinstance(checked, Proceed) else checked


# -- acting on decisions ------------------------------------------------------------


def act(run: RunContext, gates: Gates, decision: Decision) -> None:
    """What each decision does: the events that say so (which change the state, and
    end the step where the decision does: core.fold_calls), and the effect it has."""
    state = run.state
    match decision:
        case Refuse():
            run.proposer.refused()
            emit(run, ev.InvalidInput, call_id=decision.call_id, gate=decision.gate, problems=bounded(decision.problems))
            checkpoint(run)
        case Deny():
            emit(
                run,
                ev.Denied,
                call_id=decision.call_id,
                tool=decision.tool,
                rule=decision.rule,
                reason=decision.reason,
                policy_version=decision.policy_version,
                call=decision.record,
            )
            raise StopRun(Stop("tool_denied", decision.message))
        case Duplicate():
            record, done = decision.record, decision.done
            emit(
                run,
                ev.DuplicateEffect,
                call_id=record.call_id,
                tool=record.tool,
                idempotency_key=done.key,
                of_call=done.call_id,
                status=done.status,
                call=record,
            )
            checkpoint(run)
        case Blocked():
            record = decision.record
            pending = [p.call_id for p in decision.pending]
            emit(run, ev.WriteBlocked, call_id=record.call_id, tool=record.tool, pending=pending, call=record)
            checkpoint(run)
        case NeedsEvidence():
            record = decision.record
            missing, tool = decision.missing, record.tool
            emit(run, ev.CheckRequired, call_id=record.call_id, revision=state.revision, missing=missing, for_tool=tool, call=record)
            checkpoint(run)
        case ChangesRequested():
            record = decision.record
            emit(
                run,
                ev.ChangesRequested,
                call_id=record.call_id,
                tool=record.tool,
                key=decision.key,
                request_id=decision.request_id,
                message=decision.message,
                by=decision.by,
                repeated=decision.repeated,
                call=record,
            )
            checkpoint(run)
        case Ask():
            plan = fix_effect(run, decision.record, decision.spec)
            if _secrets_refused(run, decision.record, plan, asks_reviewer=True):
                return
            act(run, gates, waits.ask(run, decision.record, decision.spec, decision.authorization, plan))
        case Execute():
            _execute(run, gates, decision)
        case Complete():
            record = decision.record
            told = said_at_stop(state, "complete", FINISHED)
            emit(run, ev.Stopped, call_id=record.call_id, status="complete", message=FINISHED, call=record, **told)
            checkpoint(run)
            close_requests(run, "the run completed")
        case Stop():
            raise StopRun(decision)
        case Regate():
            act(run, gates, _admit(run, gates, decision.record, decision.spec))
        case KeepWaiting():
            checkpoint(run)
        case _:
            assert_never(decision)


def _secrets_refused(run: RunContext, record: CallRecord, plan: Plan | None, asks_reviewer: bool) -> bool:
    """The secret gate (core.publish_gate) on the findings the workspace handed in
    with the fixed effect, and on the hidden characters of the change shown: what it
    found is recorded, and a refusal settles the call."""
    if plan is None:
        return False
    findings = [*plan.findings, *hidden_findings(run.policy.publish_checks, plan.shown)]
    if not findings:
        return False
    screening = screen(run.policy.publish_checks, findings, asks_reviewer)
    if screening.decision == "clear":
        return False
    refused = screening.decision == "refuse"
    emit(
        run,
        ev.SecretsFound,
        call_id=record.call_id,
        tool=record.tool,
        findings=screening.findings,
        allowed=screening.allowed,
        decision=screening.decision,
        reason=screening.reason,
        policy_version=run.policy.version,
        problems=problems(screening) if refused else [],
        call=record if refused else None,
    )
    if refused:
        checkpoint(run)
    return refused


def _execute(run: RunContext, gates: Gates, admitted: Execute) -> None:
    record, spec, authorization = admitted.record, admitted.spec, admitted.authorization
    if spec.external_effect and record.effect is None and _secrets_refused(run, record, fix_effect(run, record, spec), asks_reviewer=False):
        return
    emit(
        run,
        ev.CallAdmitted,
        call_id=record.call_id,
        tool=spec.name,
        tool_version=spec.version,
        args=record.args,
        decision=authorization.decision,
        rule=authorization.rule,
        revision=run.state.revision,
        policy_version=run.policy.version,
        effect=record.effect,
        idempotency_key=record.idempotency_key,
        external=spec.external_effect,
    )
    # From here on the call is the ledger's: each attempt's events change it.
    stopped = execute(run, gates, run.state.ledger[record.call_id], spec)
    if stopped is not None:
        return act(run, gates, stopped)
    checkpoint(run)
    guard(run, "once the call had run and its receipt was recorded")


def _out_of_proposals(state: RunState) -> str:
    """Why the proposer's end stopped the run, naming a call the checks blocked last
    (a publish refused for a failing check would otherwise read as a plain end)."""
    said = "the proposer has no further proposals"
    feedback = state.feedback or {}
    if feedback.get("kind") != "check_required":
        return said
    missing = feedback.get("missing")
    checks = " and ".join(str(m) for m in missing) if isinstance(missing, list) else "a check"
    return f"{said}; its last call was blocked: it needs {checks} to pass on revision {str(feedback.get('revision'))[:12]} first"
