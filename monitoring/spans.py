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
from collections.abc import Iterator, Mapping, Sequence
from datetime import datetime
from typing import Any

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event as SpanEvent
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import SpanContext, SpanKind, Status, StatusCode, TraceFlags

from common.redact import redact
from core.outcome import at_stop
from runs.models import Event, Run

SCOPE = InstrumentationScope("harness")
# What one attribute may hold of an argument or a result, when the policy lets the
# trace carry them at all.
VALUE_CHARS = 4000
# The events that end a call's span: the call was refused (never executed), or its
# attempt's receipt is final (a transient one is followed by a retry).
REFUSING = {"denied", "duplicate_effect", "write_blocked", "check_required", "changes_requested"}
# The events of a call that are its gates' decisions and the reviewers' part.
DECIDING = {"call_admitted", "approval_required", "approval_consumed", "approval_refused", "approval_decided", "approval_lapsed", *REFUSING}

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
    """The spans the stored ``rows`` end. ``values``: whether arguments and results
    go into the trace (None: as the run's policy says)."""
    spans: list[ReadableSpan] = []
    for row in rows:
        spans.extend(_ending(row, resource, values))
    return spans


def _ending(row: Event, resource: Resource, values: bool | None) -> Iterator[ReadableSpan]:
    payload: Mapping[str, Any] = row.payload if isinstance(row.payload, dict) else {}
    run_id = str(row.run_id)
    kind = row.type
    if kind == "model_note" and payload.get("kind") == "usage":
        yield _model_span(row, payload, resource)
    elif kind == "evidence_recorded":
        yield _check_span(row, payload, resource)
    elif kind == "wait_ended":
        yield _wait_span(row, payload, resource)
    if row.call_id and _ends_call(row, payload):
        call = _call_span(row, resource, values)
        if call is not None:
            yield call
    if kind == "stopped":
        yield _run_span(run_id, row, payload, resource)


def _ends_call(row: Event, payload: Mapping[str, Any]) -> bool:
    if row.type in REFUSING or row.type == "stopped":
        return True
    receipt = payload.get("receipt")
    return row.type == "receipt_recorded" and not (isinstance(receipt, dict) and receipt.get("status") == "transient")


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


def _event(name: str, row: Event, attributes: Attributes) -> SpanEvent:
    return SpanEvent(name, {k: v for k, v in redact(attributes).items() if v is not None}, timestamp=_nanos(row.ts))


def _run_span(run_id: str, stopped: Event, payload: Mapping[str, Any], resource: Resource) -> ReadableSpan:
    run = Run.objects.select_related("project", "policy").get(pk=run_id)
    # The outcome as every surface tells it (core.outcome): a run that finished with
    # something asked of it undone is no success here either.
    status_said = str(payload.get("status", ""))
    outcome = str(payload.get("outcome") or status_said)
    said = str(payload.get("said") or at_stop(status_said, str(payload.get("message", ""))).sentence)
    marks = list(Event.objects.filter(run_id=run_id, type__in=["run_started", "invalid_input", "kill_requested"]).order_by("seq"))
    started = next((row.ts for row in marks if row.type == "run_started"), run.created_at)
    events = [_run_event(row) for row in marks if row.type != "run_started"]
    attributes: Attributes = {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.agent.name": run.task_id,
        "gen_ai.conversation.id": run_id,
        "harness.run.id": run_id,
        "harness.project": run.project.slug,
        "harness.policy.version": run.policy.version,
        "harness.outcome": outcome,
        "harness.stop.message": str(payload.get("message", ""))[:VALUE_CHARS],
        "harness.outcome.said": said[:VALUE_CHARS],
        "error.type": None if outcome == "complete" else outcome,
    }
    status = Status(StatusCode.OK) if outcome == "complete" else Status(StatusCode.ERROR, said[:VALUE_CHARS])
    return _span(f"invoke_agent {run.task_id}", _context(run_id, "run"), None, started, stopped.ts, attributes, resource, events, status)


def _run_event(row: Event) -> SpanEvent:
    payload = row.payload if isinstance(row.payload, dict) else {}
    if row.type == "invalid_input":
        # Refused by gates 1-3 (parse, resolve, validate) before it was a call: what the model sent is not repeated.
        return _event("harness.gate.decision", row, {"harness.decision": "invalid_input", "harness.gate": payload.get("gate")})
    return _event("harness.kill", row, {"harness.kill.by": payload.get("by"), "harness.kill.scope": payload.get("scope")})


def _model_span(row: Event, payload: Mapping[str, Any], resource: Resource) -> ReadableSpan:
    run_id = str(row.run_id)
    detail = payload.get("detail") if isinstance(payload.get("detail"), dict) else {}
    assert isinstance(detail, dict)
    # The request began when the run's previous event was written: the model is asked
    # right after a step ends.
    before = Event.objects.filter(run_id=run_id, seq__lt=row.seq).order_by("-seq").values_list("ts", flat=True).first()
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
        _context(run_id, "model", row.seq),
        _context(run_id, "run"),
        before or row.ts,
        row.ts,
        attributes,
        resource,
        kind=SpanKind.CLIENT,
    )


def _parent_of(row: Event) -> SpanContext:
    run_id = str(row.run_id)
    return _context(run_id, "call", row.call_id) if row.call_id else _context(run_id, "run")


def _check_span(row: Event, payload: Mapping[str, Any], resource: Resource) -> ReadableSpan:
    run_id = str(row.run_id)
    check_id = str(payload.get("check_id", ""))
    started = row.ts.timestamp() - float(payload.get("duration_ms") or 0) / 1000
    attributes: Attributes = {
        "harness.check.id": check_id,
        "harness.check.version": payload.get("check_version"),
        "harness.check.passed": payload.get("passed"),
        "harness.check.exit_code": payload.get("exit_code"),
        "harness.check.timed_out": payload.get("timed_out"),
        "harness.check.current": payload.get("current"),
        "harness.revision": payload.get("revision"),
        "harness.policy.version": payload.get("policy_version"),
    }
    status = Status(StatusCode.UNSET) if payload.get("passed") else Status(StatusCode.ERROR, "check failed")
    return _span(
        f"check {check_id}", _context(run_id, "check", row.seq), _parent_of(row), started, row.ts, attributes, resource, status=status
    )


def _wait_span(row: Event, payload: Mapping[str, Any], resource: Resource) -> ReadableSpan:
    run_id = str(row.run_id)
    request_id = str(payload.get("request_id", ""))
    started = row.ts.timestamp() - float(payload.get("waited_seconds") or 0)
    decided = [
        r
        for r in Event.objects.filter(
            run_id=run_id, call_id=row.call_id, type__in=["approval_required", "approval_decided", "approval_lapsed"]
        )
        if isinstance(r.payload, dict) and r.payload.get("request_id") == request_id
    ]
    granted_by = [str(r.payload.get("by")) for r in decided if r.type == "approval_decided" and r.payload.get("decision") == "granted"]
    key = next((r.payload.get("key") for r in decided if r.type == "approval_required"), None)
    attributes: Attributes = {
        "harness.approval.request_id": request_id,
        "harness.approval.key": key,
        "harness.approval.exit": payload.get("exit"),
        "harness.approval.granted_by": granted_by or None,
        "harness.approval.waited_seconds": payload.get("waited_seconds"),
    }
    events = [_call_event(r) for r in decided]
    return _span("wait for reviewer", _context(run_id, "wait", request_id), _parent_of(row), started, row.ts, attributes, resource, events)


def _call_span(end: Event, resource: Resource, values: bool | None) -> ReadableSpan | None:
    run_id = str(end.run_id)
    rows = list(Event.objects.filter(run_id=run_id, call_id=end.call_id, seq__lte=end.seq).order_by("seq"))
    if end.type == "stopped" and any(r.type in REFUSING or (r.type == "receipt_recorded" and _ends_call(r, r.payload)) for r in rows[:-1]):
        return None  # its span ended with its own settling event; the stop only names it
    payloads = [r.payload if isinstance(r.payload, dict) else {} for r in rows]
    tool = next((name for name in map(tool_of, payloads) if name), "")
    attributes: Attributes = {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": tool,
        "gen_ai.tool.call.id": end.call_id,
        "gen_ai.tool.type": "function",
        "harness.call.ended_by": end.type,
        "harness.call.executed": any(r.type == "call_started" for r in rows),
    }
    if values if values is not None else _policy_allows_values(run_id):
        attributes.update(_values(rows, payloads))
    events = [_call_event(r) for r in rows if r.type in DECIDING or r.type in ("receipt_recorded", "retry")]
    status = Status(StatusCode.ERROR, "receipt invalid") if end.type == "receipt_recorded" and end.payload.get("valid") is False else None
    return _span(
        f"execute_tool {tool}",
        _context(run_id, "call", end.call_id),
        _context(run_id, "run"),
        rows[0].ts,
        end.ts,
        attributes,
        resource,
        events,
        status,
    )


def tool_of(payload: object) -> str:
    """The tool an event of a call names: its own field, or the call's record a
    refusal or a stop carries."""
    if not isinstance(payload, dict):
        return ""
    call = payload.get("call")
    name = payload.get("tool") or payload.get("for_tool") or (call.get("tool") if isinstance(call, dict) else None)
    return str(name or "")


def _values(rows: Sequence[Event], payloads: Sequence[Mapping[str, Any]]) -> Attributes:
    args = next((p["args"] for p in payloads if isinstance(p.get("args"), dict)), None)
    result = next((p["receipt"].get("data") for p in reversed(payloads) if isinstance(p.get("receipt"), dict)), None)
    return {
        "gen_ai.tool.call.arguments": _clipped(args) if args is not None else None,
        "gen_ai.tool.call.result": _clipped(result) if result is not None else None,
    }


def _clipped(value: object) -> str:
    return json.dumps(value, sort_keys=True, default=str)[:VALUE_CHARS]


def _policy_allows_values(run_id: str) -> bool:
    document = Run.objects.filter(pk=run_id).values_list("policy__document", flat=True).first()
    return isinstance(document, dict) and document.get("trace_values") is True


def _call_event(row: Event) -> SpanEvent:
    """A gate's decision or a reviewer's, as the call's span tells it: which rule,
    which policy version, which approval key, who decided."""
    p = row.payload if isinstance(row.payload, dict) else {}
    if row.type == "call_admitted":
        attributes = {"harness.decision": "admitted", "harness.rule": p.get("rule"), "harness.policy.version": p.get("policy_version")}
    elif row.type == "approval_required":
        attributes = {
            "harness.decision": "ask",
            "harness.rule": p.get("rule"),
            "harness.policy.version": p.get("policy_version"),
            "harness.approval.key": p.get("key"),
            "harness.approval.request_id": p.get("request_id"),
        }
    elif row.type == "denied":
        attributes = {
            "harness.decision": "denied",
            "harness.rule": p.get("rule"),
            "harness.policy.version": p.get("policy_version"),
            "harness.reason": p.get("reason"),
        }
    elif row.type in REFUSING:
        attributes = {"harness.decision": row.type}
    elif row.type == "approval_decided":
        return _event(
            "harness.approval.decision",
            row,
            {
                "harness.approval.request_id": p.get("request_id"),
                "harness.approval.decision": p.get("decision"),
                "harness.approval.by": p.get("by"),
            },
        )
    elif row.type in ("approval_consumed", "approval_refused", "approval_lapsed"):
        return _event(
            f"harness.{row.type}",
            row,
            {
                "harness.approval.request_id": p.get("request_id"),
                "harness.approval.key": p.get("key"),
                "harness.approval.status": p.get("status"),
            },
        )
    else:
        receipt = p.get("receipt") if isinstance(p.get("receipt"), dict) else {}
        assert isinstance(receipt, dict)
        return _event(f"harness.{row.type}", row, {"harness.attempt": p.get("attempt"), "harness.receipt.status": receipt.get("status")})
    return _event("harness.gate.decision", row, attributes)
