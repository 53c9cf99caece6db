"""The calls' part of the one reducer (core.fold): each call's record in the ledger,
the operations (external effects by key), the call and the proposal in progress, the
calls not performed and the feedback the proposer is shown next, each changed by the
event that says so.

A step ends with the event that settles its call (a refusal, a duplicate, a blocked
write, a check required, a reviewer's request for changes, a receipt that is not
transient, the stop): the feedback is
that event's, and the call in progress is none. The next proposal clears the ledger
of the calls settled before it, a failed one leaving its line in ``not_performed``,
so a long run's state stays small.

``core.fold.apply`` applies this first: it reads what the rest of ``apply`` is about
to change (the wait a ``wait_ended`` ends, the pending effect an
``effect_reconciled`` resolves)."""

from __future__ import annotations

from typing import Any, Literal

from core import events as ev
from core import feedback as fb
from core.call_record import TERMINAL_STATES, CallRecord
from core.jsonutil import JSON
from core.lifecycle import WAIT_EXITS
from core.state import Operation, OperationStatus, RunState, Unmet
from core.visible import HIDDEN_KIND


def apply_to_calls(state: RunState, event: ev.AnyEvent) -> None:
    match event.type:
        case "proposed":
            _clear_settled(state)
            state.current_call = event.call_id
            state.current_proposal = event.proposal if event.accepted else None
        case "invalid_input" | "secrets_found" | "denied" | "duplicate_effect" | "changes_requested" | "write_blocked" | "check_required":
            _not_performed(state, event)
        case "call_admitted":
            _admitted(state, event)
        case "approval_required":
            _record_for(
                state,
                _id(event),
                event.tool,
                event.args,
                decision="ask",
                rule=event.rule,
                policy_version=event.policy_version,
                approval_key=event.key,
                effect=event.effect,
                idempotency_key=event.idempotency_key,
            )
        case "approval_consumed" | "wait_ended" | "call_started" | "retry" | "pending_effect_recorded":
            _performing(state, event)
        case "receipt_recorded":
            _receipt(state, event)
        case "effect_reconciled":
            _reconciled(state, event)
        case "run_resumed":
            _recovered(state, event)
        case "stopped":
            if (settled := _put(state, event.call)) is not None:
                settled.state = "completed" if event.status == "complete" else "failed"
            if event.status == "complete":
                state.feedback = fb.stored(fb.Complete(call_id=_id(event)))
            state.current_call, state.current_proposal = None, None
        case _:
            # Every other event leaves the calls as they are.
            pass


def _not_performed(
    state: RunState,
    event: ev.InvalidInput | ev.SecretsFound | ev.Denied | ev.DuplicateEffect | ev.ChangesRequested | ev.WriteBlocked | ev.CheckRequired,
) -> None:
    """A call settled before it was performed: refused by a gate, a reviewer or the
    scan, and what the model reads next."""
    match event.type:
        case "invalid_input":
            _end_step(state, fb.InvalidInput(call_id=_id(event), problems=event.problems))
        case "secrets_found":
            if event.decision == "refuse":
                reason: Literal["secret_found", "hidden_characters"] = (
                    "secret_found" if any(f.get("kind") != HIDDEN_KIND for f in event.findings) else "hidden_characters"
                )
                _refused(state, event.call, reason)
                _unmet(state, event, reason, found_where(event.findings), external=True)
                _end_step(state, fb.InvalidInput(call_id=_id(event), problems=event.problems))
        case "denied":
            _refused(state, event.call, "tool_denied")
        case "duplicate_effect":
            _duplicate(state, event)
        case "changes_requested":
            _refused(state, event.call, "changes_requested")
            external = event.call is not None and event.call.idempotency_key is not None
            _unmet(state, event, "changes_requested", f"{event.by}, on {event.tool} {event.call_id}", external=external)
            state.changes_requested[event.key] = {"message": event.message, "by": event.by, "request_id": event.request_id}
            changes = fb.ChangesRequested(call_id=_id(event), tool=event.tool, message=event.message, by=event.by)
            _end_step(state, changes)
        case "write_blocked":
            _refused(state, event.call, "write_blocked")
            pending = [p for p in state.unresolved_effects() if p.call_id in event.pending]
            _end_step(state, fb.WriteBlocked(call_id=_id(event), pending=pending))
        case "check_required":
            _refused(state, event.call, "check_required")
            _end_step(state, fb.CheckRequired(call_id=_id(event), revision=event.revision, missing=list(event.missing)))


def _performing(state: RunState, event: ev.ApprovalConsumed | ev.WaitEnded | ev.CallStarted | ev.Retry | ev.PendingEffectRecorded) -> None:
    """An admitted call on its way: its grant used, its wait over, an attempt started or
    retried, or its effect's outcome unknown."""
    match event.type:
        case "approval_consumed":
            state.ledger[_id(event)].granted_key = event.key
        case "wait_ended":
            # The call goes back through the gates without a grant: its effect is fixed
            # anew, at the revision then, if it asks again.
            if event.run == "running" and WAIT_EXITS[event.exit].request != "consumed":
                record = state.ledger[_id(event)]
                record.approval_key, record.effect = None, None
        case "call_started":
            record = state.ledger[_id(event)]
            record.attempts, record.state, record.revision_before = event.attempt, "started", state.revision
        case "retry":
            if event.transient_reason is not None:
                record = state.ledger[_id(event)]
                record.transient_reasons.append(event.transient_reason)
                record.state = "allowed"
        case "pending_effect_recorded":
            record = state.ledger[_id(event)]
            record.state = "unknown"
            _set_operation(state, event.idempotency_key, record.call_id, "unknown")


def _id(event: ev.Event) -> str:
    assert event.call_id is not None, f"a {type(event).__name__} event names its call"
    return event.call_id


def _put(state: RunState, call: CallRecord | None) -> CallRecord | None:
    """The record an event carries (a call settled before it was admitted), in the
    ledger: a copy, which the fold changes next while the event stays as it was."""
    if call is None:
        return None
    record = state.ledger[call.call_id] = call.model_copy(deep=True)
    return record


# Why a call settled before it was performed, kept on its line in ``not_performed``.
REFUSALS = ("secret_found", "hidden_characters", "tool_denied", "changes_requested", "write_blocked", "check_required")


def _refused(state: RunState, call: CallRecord | None, reason: str) -> None:
    if (record := _put(state, call)) is not None:
        record.state, record.last_status = "failed", reason


def found_where(findings: list[dict[str, JSON]]) -> str:
    """The secret scan's findings as the outcome quotes them: kind, file and line (never the value)."""
    named = [
        f"{f.get('kind') or 'a secret'}{f' ({chars})' if (chars := f.get('chars')) else ''} in {f.get('path')}, line {f.get('line')}"
        for f in findings[:3]
    ]
    more = len(findings) - len(named)
    return "; ".join(named) + (f"; and {more} more" if more > 0 else "")


def _unmet(
    state: RunState,
    event: ev.SecretsFound | ev.ChangesRequested,
    reason: Literal["changes_requested", "secret_found", "hidden_characters"],
    detail: str,
    *,
    external: bool,
) -> None:
    """Something asked of the run that this call did not do; the first of its kind for a
    tool is the one told (the model insisting changes nothing of what was asked)."""
    call_id, tool = _id(event), event.tool
    if not any(u.tool == tool and u.reason == reason for u in state.unmet):
        state.unmet.append(Unmet(call_id=call_id, tool=tool, reason=reason, detail=detail, external=external))


def _taken_up(state: RunState, tool: str) -> None:
    """A call of ``tool`` went through: what was asked of an earlier one is done."""
    if state.unmet:
        state.unmet = [u for u in state.unmet if u.tool != tool]


def _record_for(run: RunState, call_id: str, tool: str, args: dict[str, JSON], **fields: Any) -> CallRecord:
    """The call's record: the one the ledger holds (a call gated again), ``fields``
    set, or a new one made with them (at once: each step makes one)."""
    record = run.ledger.get(call_id)
    if record is None:
        fields.setdefault("state", "validated")
        record = run.ledger[call_id] = CallRecord(call_id=call_id, tool=tool, args=args, **fields)
    else:
        for name, value in fields.items():
            setattr(record, name, value)
    return record


def _end_step(state: RunState, feedback: fb.Feedback) -> None:
    state.feedback = fb.stored(feedback)
    state.current_call, state.current_proposal = None, None


def _clear_settled(state: RunState) -> None:
    for call_id, record in list(state.ledger.items()):
        if record.state not in TERMINAL_STATES or call_id == state.current_call:
            continue
        if record.state == "failed":
            line = {"call_id": call_id, "tool": record.tool, "state": record.state}
            if record.last_status in REFUSALS:
                line["reason"] = record.last_status
            state.not_performed.append(line)
        del state.ledger[call_id]


def _duplicate(state: RunState, event: ev.DuplicateEffect) -> None:
    """Nothing is performed: the proposer is shown the first call's outcome."""
    record = _put(state, event.call) or _record_for(state, _id(event), event.tool, {})
    record.state, record.last_status = "completed", "duplicate"
    state.not_performed.append({"call_id": record.call_id, "tool": record.tool, "state": "duplicate", "of_call": event.of_call})
    # A log of version 1 never put its operations on the record (core.fold compares it
    # without its calls): the first outcome is then unknown to the fold.
    done = state.operations.get(event.idempotency_key)
    first = done.outcome if done is not None else {}
    _end_step(
        state,
        fb.Duplicate(
            call_id=record.call_id,
            tool=record.tool,
            of_call=event.of_call,
            idempotency_key=event.idempotency_key,
            status=event.status,
            first_outcome=first,
        ),
    )


def _admitted(state: RunState, event: ev.CallAdmitted) -> None:
    record = _record_for(
        state,
        _id(event),
        event.tool,
        event.args,
        state="allowed",
        decision=event.decision,
        rule=event.rule,
        policy_version=event.policy_version,
        effect=event.effect,
        idempotency_key=event.idempotency_key,
    )
    # The operation is known before any attempt: a crash during one leaves it known,
    # so the same effect is never performed twice.
    if event.external:
        assert event.idempotency_key is not None
        state.operations[event.idempotency_key] = Operation(
            key=event.idempotency_key, tool=event.tool, args=event.args, revision=event.revision, call_id=record.call_id
        )


def _receipt(state: RunState, event: ev.ReceiptRecorded) -> None:
    record = state.ledger[_id(event)]
    if not event.valid:
        # A pending effect follows for a tool with one.
        record.state = "failed"
        return
    receipt = event.receipt
    assert isinstance(receipt, dict)
    status, data = receipt["status"], receipt["data"]
    assert isinstance(data, dict)
    record.last_status = str(status)
    if status == "transient":
        return
    feedback: fb.Result | fb.OutcomeUnknown
    outcome: OperationStatus
    if status == "unknown":
        record.state = "unknown"
        feedback = fb.OutcomeUnknown(call_id=record.call_id, tool=event.tool, idempotency_key=record.idempotency_key, data=data)
        outcome = "unknown"
    else:
        record.state = "completed"
        artifacts = receipt.get("artifacts")
        feedback = fb.Result(
            call_id=record.call_id,
            tool=event.tool,
            revision=event.harness_revision,
            data=data,
            artifacts=[str(a) for a in artifacts] if isinstance(artifacts, list) else [],
            earlier_attempts=list(record.transient_reasons) or None,
        )
        outcome = "applied" if receipt["effect"] == "applied" else "not_applied"
        if outcome == "applied" or not event.external:
            _taken_up(state, event.tool)
    operation = _set_operation(state, record.idempotency_key, record.call_id, outcome)
    if operation is not None:
        operation.outcome = feedback.to_json()
    _end_step(state, feedback)


def _set_operation(state: RunState, key: str | None, call_id: str, status: OperationStatus) -> Operation | None:
    """The operation ``call_id`` performs (under ``key``), now ``status``; none if the
    key names another call's."""
    operation = state.operations.get(key or "")
    if operation is None or operation.call_id != call_id:
        return None
    operation.status = status
    return operation


def _reconciled(state: RunState, event: ev.EffectReconciled) -> None:
    """The pending effect looked up: its call completed or failed. Also written for an
    interrupted write found not to have happened, which was never a pending effect."""
    effect = next((p for p in state.unresolved_effects() if p.call_id == event.call_id), None)
    if effect is None:
        return
    if (record := state.ledger.get(effect.call_id)) is not None:
        record.state = "completed" if event.applied else "failed"
    if event.applied:
        _taken_up(state, effect.tool)
    operation = _set_operation(state, effect.idempotency_key, effect.call_id, "applied" if event.applied else "not_applied")
    if operation is not None:
        operation.outcome = {"reconciled": event.detail}


def _recovered(state: RunState, event: ev.RunResumed) -> None:
    """A call the last driver left in flight: admitted again, or its step ends with the
    proposer told it was interrupted."""
    if event.recovery is None:
        return
    record = state.ledger[_id(event)]
    if event.recovery == "retried":
        record.state = "validated"
        return
    if event.recovery == "failed":
        record.state = "failed"
    state.feedback = fb.stored(fb.Interrupted(call_id=record.call_id, tool=record.tool))
    if state.current_call == record.call_id:
        state.current_call, state.current_proposal = None, None
