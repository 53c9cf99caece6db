"""The spans of a run's trace, derived from its stored events (docs/design.md, Traces).

A run lives across workers, restarts and waits of days, so no process holds its
spans open: each span is made whole, at the checkpoint that stores the event ending
it, from the log (already masked). Its ids are derived from the run's: the trace id
is the run's UUID, a span id a digest of the run, the span's kind and its key (call
id, request id, seq), so every process, at any time, names the same span the same
way and a parent exported later (the run's, at its stop) is the one its children
already point to."""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Iterable, Iterator, Sequence
from datetime import datetime
from typing import Any, assert_never

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event as SpanEvent
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import SpanContext, SpanKind, Status, StatusCode, TraceFlags

from common.redact import redact
from core import events as ev
from core.outcome import at_stop
from runs.models import Event, Run
from runs.persistence.decisions import decision_of

SCOPE = InstrumentationScope("harness")
# What one attribute may hold of an argument or a result, when the policy lets the
# trace carry them at all.
VALUE_CHARS = 4000
# The events that end a call's span: the call was refused (never executed), or its
# attempt's receipt is final (a transient one is followed by a retry).
_Refusing = ev.Denied | ev.DuplicateEffect | ev.WriteBlocked | ev.CheckRequired | ev.ChangesRequested
# The events a call's span shows as its own: its gates' decisions, the reviewers'
# part, and its attempts' ends.
_Shown = (
    ev.CallAdmitted
    | ev.ApprovalRequired
    | ev.ApprovalConsumed
    | ev.ApprovalRefused
    | ev.ApprovalDecided
    | ev.ApprovalLapsed
    | _Refusing
    | ev.ReceiptRecorded
    | ev.Retry
)
# The events naming their tool, and those carrying the call's record, which names it.
_NamingTool = (
    ev.SecretsFound
    | ev.Denied
    | ev.CallAdmitted
    | ev.ApprovalRequired
    | ev.DuplicateEffect
    | ev.ChangesRequested
    | ev.CallStarted
    | ev.ReceiptRecorded
    | ev.PendingEffectRecorded
    | ev.WriteBlocked
)
_CarryingCall = ev.SecretsFound | ev.Denied | ev.DuplicateEffect | ev.ChangesRequested | ev.CheckRequired | ev.WriteBlocked | ev.Stopped

Attributes = dict[str, Any]


def trace_id_of(run_id: str) -> int:
    return uuid.UUID(str(run_id)).int


def trace_id_text(run_id: str) -> str:
    """As tracing tools show it: 32 hex digits."""
    return f"{trace_id_of(run_id):032x}"


def span_id_of(run_id: str, kind: str, key: object = "") -> int:
    digest = hashlib.sha256(f"{run_id}/{kind}/{key}".encode()).digest()
    return int.from_bytes(digest[:8], "big") or 1


def spans_for(rows: Sequence[Event], resource: Resource, *, values: bool | None = None) -> list[ReadableSpan]:
    """The spans the stored ``rows`` end, each read as its typed event (the fold's
    reading, runs.models.Event.typed). ``values``: whether arguments and results go
    into the trace (None: as the run's policy says)."""
    spans: list[ReadableSpan] = []
    for event in _typed(rows):
        spans.extend(_ending(event, resource, values))
    return spans


def _typed(rows: Iterable[Event]) -> list[ev.AnyEvent]:
    return [row.typed() for row in rows]


def _ending(event: ev.AnyEvent, resource: Resource, values: bool | None) -> Iterator[ReadableSpan]:
    if isinstance(event, ev.ModelNote) and event.kind == "usage":
        yield _model_span(event, resource)
    elif isinstance(event, ev.EvidenceRecorded):
        yield _check_span(event, resource)
    elif isinstance(event, ev.WaitEnded):
        yield _wait_span(event, resource)
    if event.call_id and _ends_call(event):
        call = _call_span(event, resource, values)
        if call is not None:
            yield call
    if isinstance(event, ev.Stopped):
        yield _run_span(event, resource)


def _settles(event: ev.AnyEvent) -> bool:
    """The call was refused, or its attempt's receipt is final."""
    return isinstance(event, _Refusing) or (isinstance(event, ev.ReceiptRecorded) and event.receipt_status() != "transient")


def _ends_call(event: ev.AnyEvent) -> bool:
    return isinstance(event, ev.Stopped) or _settles(event)


def _context(run_id: str, kind: str, key: object = "") -> SpanContext:
    return SpanContext(trace_id_of(run_id), span_id_of(run_id, kind, key), is_remote=False, trace_flags=TraceFlags(TraceFlags.SAMPLED))


def _nanos(ts: datetime | float) -> int:
    seconds = ts.timestamp() if isinstance(ts, datetime) else ts
    return int(seconds * 1e9)


def _span(
    name: str,
    context: SpanContext,
    parent: SpanContext | None,
    start: datetime | float,
    end: datetime | float,
    attributes: Attributes,
    resource: Resource,
    events: Sequence[SpanEvent] = (),
    status: Status | None = None,
    kind: SpanKind = SpanKind.INTERNAL,
) -> ReadableSpan:
    # Masked once more, whatever the log held: a value the secrets list learnt of
    # since the event was written is masked too.
    clean = {key: value for key, value in redact(attributes).items() if value is not None}
    return ReadableSpan(
        name=name,
        context=context,
        parent=parent,
        resource=resource,
        attributes=clean,
        events=events,
        kind=kind,
        status=status or Status(StatusCode.UNSET),
        start_time=_nanos(start),
        end_time=max(_nanos(start), _nanos(end)),
        instrumentation_scope=SCOPE,
    )


def _event(name: str, event: ev.AnyEvent, attributes: Attributes) -> SpanEvent:
    return SpanEvent(name, {k: v for k, v in redact(attributes).items() if v is not None}, timestamp=_nanos(event.ts))


def _run_span(stopped: ev.Stopped, resource: Resource) -> ReadableSpan:
    run_id = stopped.run_id
    run = Run.objects.select_related("project", "policy").get(pk=run_id)
    # The outcome as every surface tells it (core.outcome): a run that finished with
    # something asked of it undone is no success here either.
    outcome = stopped.outcome or stopped.status
    said = stopped.said or at_stop(stopped.status, stopped.message).sentence
    kinds = [ev.type_name(kind) for kind in (ev.RunStarted, ev.InvalidInput, ev.KillRequested)]
    rows = list(Event.objects.filter(run_id=run_id, type__in=kinds).order_by("seq"))
    marks = _typed(rows)
    ledger = ledger_attributes(rows)
    started = next((mark.ts for mark in marks if isinstance(mark, ev.RunStarted)), run.created_at)
    events = [_decided(_run_event(mark), ledger.get(mark.seq)) for mark in marks if isinstance(mark, ev.InvalidInput | ev.KillRequested)]
    attributes: Attributes = {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.agent.name": run.task_id,
        "gen_ai.conversation.id": run_id,
        "harness.run.id": run_id,
        "harness.project": run.project.slug,
        "harness.policy.version": run.policy.version,
        "harness.outcome": outcome,
        "harness.stop.message": stopped.message[:VALUE_CHARS],
        "harness.outcome.said": said[:VALUE_CHARS],
        "error.type": None if outcome == "complete" else outcome,
    }
    status = Status(StatusCode.OK) if outcome == "complete" else Status(StatusCode.ERROR, said[:VALUE_CHARS])
    return _span(f"invoke_agent {run.task_id}", _context(run_id, "run"), None, started, stopped.ts, attributes, resource, events, status)


def _run_event(mark: ev.InvalidInput | ev.KillRequested) -> SpanEvent:
    match mark:
        case ev.InvalidInput():
            # Refused by gates 1-3 (parse, resolve, validate) before it was a call: what the model sent is not repeated.
            return _event("harness.gate.decision", mark, {"harness.decision": "invalid_input", "harness.gate": mark.gate})
        case ev.KillRequested():
            return _event("harness.kill", mark, {"harness.kill.by": mark.by, "harness.kill.scope": mark.scope})
        case _:
            assert_never(mark)


def _model_span(note: ev.ModelNote, resource: Resource) -> ReadableSpan:
    run_id = note.run_id
    detail = note.detail
    # The request began when the run's previous event was written: the model is asked
    # right after a step ends.
    before = Event.objects.filter(run_id=run_id, seq__lt=note.seq).order_by("-seq").values_list("ts", flat=True).first()
    model = str(detail.get("model") or "unknown")
    attributes: Attributes = {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": detail.get("provider"),
        "gen_ai.request.model": model,
        "gen_ai.usage.input_tokens": detail.get("input_tokens"),
        "gen_ai.usage.output_tokens": detail.get("output_tokens"),
        "gen_ai.response.finish_reasons": [str(detail["stop_reason"])] if detail.get("stop_reason") else None,
        "harness.cost_usd": detail.get("cost_usd"),
        "harness.usage.estimated": detail.get("estimated"),
    }
    return _span(
        f"chat {model}",
        _context(run_id, "model", note.seq),
        _context(run_id, "run"),
        before or note.ts,
        note.ts,
        attributes,
        resource,
        kind=SpanKind.CLIENT,
    )


def _parent_of(event: ev.AnyEvent) -> SpanContext:
    return _context(event.run_id, "call", event.call_id) if event.call_id else _context(event.run_id, "run")


def _check_span(evidence: ev.EvidenceRecorded, resource: Resource) -> ReadableSpan:
    run_id = evidence.run_id
    started = evidence.ts - evidence.duration_ms / 1000
    attributes: Attributes = {
        "harness.check.id": evidence.check_id,
        "harness.check.version": evidence.check_version,
        "harness.check.passed": evidence.passed,
        "harness.check.exit_code": evidence.exit_code,
        "harness.check.timed_out": evidence.timed_out,
        "harness.check.current": evidence.current,
        "harness.revision": evidence.revision,
        "harness.policy.version": evidence.policy_version,
    }
    status = Status(StatusCode.UNSET) if evidence.passed else Status(StatusCode.ERROR, "check failed")
    return _span(
        f"check {evidence.check_id}",
        _context(run_id, "check", evidence.seq),
        _parent_of(evidence),
        started,
        evidence.ts,
        attributes,
        resource,
        status=status,
    )


def _wait_span(ended: ev.WaitEnded, resource: Resource) -> ReadableSpan:
    run_id = ended.run_id
    kinds = [ev.type_name(kind) for kind in (ev.ApprovalRequired, ev.ApprovalDecided, ev.ApprovalLapsed)]
    rows = list(Event.objects.filter(run_id=run_id, call_id=ended.call_id, type__in=kinds))
    ledger = ledger_attributes(rows)
    decided = [
        event
        for event in _typed(rows)
        if isinstance(event, ev.ApprovalRequired | ev.ApprovalDecided | ev.ApprovalLapsed) and event.request_id == ended.request_id
    ]
    granted_by = [event.by for event in decided if isinstance(event, ev.ApprovalDecided) and event.decision == "granted"]
    key = next((event.key for event in decided if isinstance(event, ev.ApprovalRequired)), None)
    attributes: Attributes = {
        "harness.approval.request_id": ended.request_id,
        "harness.approval.key": key,
        "harness.approval.exit": ended.exit,
        "harness.approval.granted_by": granted_by or None,
        "harness.approval.waited_seconds": ended.waited_seconds,
    }
    events = [_decided(_call_event(event), ledger.get(event.seq)) for event in decided]
    started = ended.ts - ended.waited_seconds
    return _span(
        "wait for reviewer", _context(run_id, "wait", ended.request_id), _parent_of(ended), started, ended.ts, attributes, resource, events
    )


def _call_span(end: ev.AnyEvent, resource: Resource, values: bool | None) -> ReadableSpan | None:
    run_id = end.run_id
    rows = list(Event.objects.filter(run_id=run_id, call_id=end.call_id, seq__lte=end.seq).order_by("seq"))
    log = _typed(rows)
    if isinstance(end, ev.Stopped) and any(_settles(event) for event in log[:-1]):
        return None  # its span ended with its own settling event; the stop only names it
    tool = next((name for name in map(tool_of, log) if name), "")
    attributes: Attributes = {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": tool,
        "gen_ai.tool.call.id": end.call_id,
        "gen_ai.tool.type": "function",
        "harness.call.ended_by": end.type,
        "harness.call.executed": any(isinstance(event, ev.CallStarted) for event in log),
    }
    if values if values is not None else _policy_allows_values(run_id):
        attributes.update(_values(log))
    ledger = ledger_attributes(rows)
    events = [_decided(_call_event(event), ledger.get(event.seq)) for event in log if _shown_in_call(event)]  # type: ignore[arg-type]  # _shown_in_call narrows
    status = Status(StatusCode.ERROR, "receipt invalid") if isinstance(end, ev.ReceiptRecorded) and not end.valid else None
    return _span(
        f"execute_tool {tool}",
        _context(run_id, "call", end.call_id),
        _context(run_id, "run"),
        log[0].ts,
        end.ts,
        attributes,
        resource,
        events,
        status,
    )


def tool_of(event: ev.AnyEvent) -> str:
    """The tool an event of a call names: its own field, or the call's record a
    refusal or a stop carries."""
    name = event.for_tool if isinstance(event, ev.CheckRequired) else event.tool if isinstance(event, _NamingTool) else ""
    if not name and isinstance(event, _CarryingCall) and event.call is not None:
        return event.call.tool
    return name


def _values(log: Sequence[ev.AnyEvent]) -> Attributes:
    args = next((event.args for event in log if isinstance(event, ev.CallAdmitted | ev.ApprovalRequired | ev.PendingEffectRecorded)), None)
    receipts = (event.receipt for event in reversed(log) if isinstance(event, ev.ReceiptRecorded) and isinstance(event.receipt, dict))
    result = next((receipt.get("data") for receipt in receipts), None)
    return {
        "gen_ai.tool.call.arguments": _clipped(args) if args is not None else None,
        "gen_ai.tool.call.result": _clipped(result) if result is not None else None,
    }


def _clipped(value: object) -> str:
    return json.dumps(value, sort_keys=True, default=str)[:VALUE_CHARS]


def _policy_allows_values(run_id: str) -> bool:
    document = Run.objects.filter(pk=run_id).values_list("policy__document", flat=True).first()
    return isinstance(document, dict) and document.get("trace_values") is True


def _shown_in_call(event: ev.AnyEvent) -> bool:
    """A call's span tells its gates' decisions (a secret scan's refusal too), the reviewers' part and its attempts' ends."""
    return isinstance(event, _Shown) or isinstance(event, ev.SecretsFound) and event.decision == "refuse"


def ledger_attributes(rows: Iterable[Event]) -> dict[int, Attributes]:
    """The decision ledger's account of each decision among ``rows``, by seq, as the
    attributes of the span event that tells it (docs/design.md, Traces): the kind of
    decision and its outcome, who decided (a policy rule, a person, a person through a
    token, Harness itself), the rule, the policy version, and the digest of what the
    decider was shown, as the decision's ledger entry holds them (runs.persistence.decisions)."""
    found: dict[int, Attributes] = {}
    for row in rows:
        decision = decision_of(row)
        if decision is None:
            continue
        kind = str(decision["kind"])
        actor = decision["actor"]
        decided = decision["decided"]
        found[row.seq] = {
            "harness.decision.kind": kind,
            "harness.decision.outcome": kind.partition(".")[2],
            "harness.decider.kind": actor.kind,
            "harness.decider.name": actor.name,
            "harness.decision.rule": actor.name if actor.kind == "rule" else None,
            "harness.policy.version": decision.get("policy_version"),
            "harness.decision.shown": decision["shown"].digest,
            "gen_ai.tool.name": decided.get("tool"),
            "gen_ai.tool.call.id": row.call_id or None,
        }
    return found


def _decided(event: SpanEvent, ledger: Attributes | None) -> SpanEvent:
    """``event`` with the ledger's account of the decision it tells, if it tells one."""
    if not ledger:
        return event
    extra = {key: value for key, value in redact(ledger).items() if value is not None}
    return SpanEvent(event.name, {**extra, **(event.attributes or {})}, timestamp=event.timestamp)


def _call_event(event: _Shown | ev.SecretsFound) -> SpanEvent:
    """A gate's decision or a reviewer's, as the call's span tells it: which rule,
    which policy version, which approval key, who decided; or an attempt's end."""
    match event:
        case ev.CallAdmitted():
            return _decision(
                event, {"harness.decision": "admitted", "harness.rule": event.rule, "harness.policy.version": event.policy_version}
            )
        case ev.ApprovalRequired():
            return _decision(
                event,
                {
                    "harness.decision": "ask",
                    "harness.rule": event.rule,
                    "harness.policy.version": event.policy_version,
                    "harness.approval.key": event.key,
                    "harness.approval.request_id": event.request_id,
                },
            )
        case ev.Denied():
            return _decision(
                event,
                {
                    "harness.decision": "denied",
                    "harness.rule": event.rule,
                    "harness.policy.version": event.policy_version,
                    "harness.reason": event.reason,
                },
            )
        case ev.DuplicateEffect() | ev.WriteBlocked() | ev.CheckRequired() | ev.ChangesRequested():
            return _decision(event, {"harness.decision": event.type})
        case ev.SecretsFound():
            return _decision(event, {"harness.decision": event.type, "harness.policy.version": event.policy_version})
        case ev.ApprovalDecided():
            return _event(
                "harness.approval.decision",
                event,
                {
                    "harness.approval.request_id": event.request_id,
                    "harness.approval.decision": event.decision,
                    "harness.approval.by": event.by,
                },
            )
        case ev.ApprovalConsumed() | ev.ApprovalRefused():
            return _event(
                f"harness.{event.type}", event, {"harness.approval.request_id": event.request_id, "harness.approval.key": event.key}
            )
        case ev.ApprovalLapsed():
            return _event(
                f"harness.{event.type}", event, {"harness.approval.request_id": event.request_id, "harness.approval.status": event.status}
            )
        case ev.ReceiptRecorded():
            return _event(
                f"harness.{event.type}", event, {"harness.attempt": event.attempt, "harness.receipt.status": event.receipt_status()}
            )
        case ev.Retry():
            return _event(f"harness.{event.type}", event, {"harness.attempt": event.attempt})
        case _:
            assert_never(event)


def _decision(event: _Shown | ev.SecretsFound, attributes: Attributes) -> SpanEvent:
    return _event("harness.gate.decision", event, attributes)
