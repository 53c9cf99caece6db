"""The spans of a run's trace, derived from its stored events (docs/design.md, Traces).

A run lives across workers, restarts and waits of days, so no process holds its
spans open: each span is made whole, at the checkpoint that stores the event ending
it, from the log (already masked). Its ids are derived from the run's: the trace id
is the run's UUID, a span id a digest of the run, the span's kind and its key (call
id, request id, seq), so every process, at any time, names the same span the same
way and a parent exported later (the run's, at its stop) is the one its children
already point to."""

from __future__ import annotations

import functools
import hashlib
import json
import threading
import uuid
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from enum import Enum
from typing import Any, NamedTuple, assert_never, cast, get_args

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event as SpanEvent
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import SpanContext, SpanKind, Status, StatusCode, TraceFlags

from common.redact import masked_alike, redact, secret_values
from core import events as ev
from core.outcome import at_stop
from runs.models import Event, Run
from runs.persistence.decisions import decision_of
from runs.persistence.eventlog import row_time

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
_Arguing = ev.CallAdmitted | ev.ApprovalRequired | ev.PendingEffectRecorded


def _classes(union: object) -> frozenset[type]:
    """The event classes of ``union`` and their subclasses, for ``type(event) in``: an
    ``isinstance`` against a pydantic model's class goes through ABCMeta's check, and
    against a union through each class's in turn, microseconds a test where a step's
    spans make dozens (the type tests below narrow as ``isinstance`` would)."""
    found: set[type] = set()
    waiting = list(get_args(union))
    while waiting:
        cls = waiting.pop()
        found.add(cls)
        waiting += cls.__subclasses__()
    return frozenset(found)


_REFUSING, _SHOWN, _NAMING_TOOL, _CARRYING_CALL, _ARGUING = map(_classes, (_Refusing, _Shown, _NamingTool, _CarryingCall, _Arguing))

Attributes = dict[str, Any]


def trace_id_of(run_id: str) -> int:
    return uuid.UUID(str(run_id)).int


def trace_id_text(run_id: str) -> str:
    """As tracing tools show it: 32 hex digits."""
    return f"{trace_id_of(run_id):032x}"


def span_id_of(run_id: str, kind: str, key: object = "") -> int:
    digest = hashlib.sha256(f"{run_id}/{kind}/{key}".encode()).digest()
    return int.from_bytes(digest[:8], "big") or 1


Decided = dict[str, Any] | None


class Ledger(Enum):
    UNREAD = "unread"  # the row's decision is not known here: decision_of reads it


class Stored(NamedTuple):
    """A stored row, its typed event (as ``row.typed()`` reads it), its decision as the
    ledger recorded it (or None; ``Ledger.UNREAD`` when not known), and the secrets it
    was masked with as it was stored (None: not known, it was read from the log)."""

    row: Event | Shown
    event: ev.AnyEvent
    decision: Decided | Ledger = Ledger.UNREAD
    secrets: Sequence[str] | None = None


def _read(row: Event) -> Stored:
    return Stored(row, row.typed())


class Written(NamedTuple):
    """What the process that stored a batch of rows knew of them (the event writer's
    ``events_stored``, runs.persistence.signals): the events they were stored from,
    whether each row's payload is its event's own (nothing masked in it), the secrets
    they were masked with, each row's decision as the ledger recorded it (None when
    the ledger was not told: the ledger's benchmark turns it off), and the seqs the
    rows were given (None: read from each row)."""

    events: Sequence[ev.AnyEvent]
    as_given: Sequence[bool]
    secrets: Sequence[str]
    decisions: Sequence[Decided] | None
    seqs: Sequence[int] | None = None

    def stored(self, index: int, rows: Sequence[Event]) -> Stored:
        """The ``index``-th of ``rows`` as ``Stored``: its event read from the row only
        where masking changed its payload; otherwise the event it was stored from, with
        the seq the row was given and the time the row holds (to the microsecond). The
        row itself is made (runs.persistence.eventlog.StoredRows, some 20 µs) only where
        it is read: its event or its decision is not known here."""
        decision = Ledger.UNREAD if self.decisions is None else self.decisions[index]
        if not self.as_given[index]:
            read = rows[index]
            return Stored(read, read.typed(), decision, self.secrets)
        event = self.events[index]
        row: Event | Shown
        if self.seqs is None or decision is Ledger.UNREAD:
            row = rows[index]
            seq, at = row.seq, row.ts
        else:
            seq, at = self.seqs[index], row_time(event.ts)
            row = Shown(event.run_id, seq, event.call_id, at)
        ts = at.timestamp()
        if event.ts != ts or event.seq != seq:
            event = event.model_copy(update={"ts": ts, "seq": seq})
        return Stored(row, event, decision, self.secrets)


class Shown(NamedTuple):
    """What a span tells of a stored row besides its event, when the row was not read:
    its run, seq, call and time, as the writer gave them."""

    run_id: str
    seq: int
    call_id: str | None
    ts: datetime


class Before(NamedTuple):
    """What this process saw of a run before one of its rows, when nothing of it can
    be missing: the previous row's time, and the rows of the row's call from its start."""

    previous_ts: datetime | None
    call: Sequence[Stored] | None


@dataclass
class _Seen:
    next_seq: int = 0
    last_ts: datetime | None = None
    call_id: str | None = None
    call: list[Stored] = field(default_factory=list)


class Recent:
    """What this process saw stored of the runs it traces, row after row in commit
    order, so that a step's spans are made without reading back what the step's
    previous checkpoint stored: the newest row of each run, and the rows of its latest
    call from the call's first event (``proposed``: core.loop names a call there).

    Nothing can be missing while the seqs it sees follow on (a run's seqs are gap-free:
    runs.persistence.eventlog): a row that does not follow the run's last seen one
    (another process wrote in between, a reviewer's decision in the web process, or
    tracing was off) forgets the run, and what it no longer holds is read from the log
    as before. Bounded: a call's rows are let go when its span is made, a run's at its
    stop, and all of them when more than ``KEPT`` runs are held."""

    KEPT = 1_000

    def __init__(self) -> None:
        self._runs: dict[str, _Seen] = {}
        # Export runs in whichever thread committed (a web server's several): one
        # row's look and update at a time.
        self._lock = threading.Lock()

    def see(self, stored: Stored, ends_call: bool) -> Before:
        """Take ``stored`` (whose event ends its call's span or not) in, and say what
        was seen before it."""
        row, event = stored.row, stored.event
        run_id = str(row.run_id)
        with self._lock:
            seen = self._runs.get(run_id)
            follows = seen is not None and seen.next_seq == row.seq
            if seen is None or not follows:
                if len(self._runs) >= self.KEPT:
                    self._runs.clear()
                seen = self._runs[run_id] = _Seen()
            previous = seen.last_ts if follows else None
            if type(event) is ev.Proposed:
                seen.call_id, seen.call = event.call_id, []
            held = event.call_id is not None and event.call_id == seen.call_id
            if held:
                seen.call.append(stored)
            seen.next_seq, seen.last_ts = row.seq + 1, row.ts
            # A copy: the list grows on in the next thread to see a row of this run.
            return Before(previous, tuple(seen.call) if held and ends_call else None)

    def ended(self, event: ev.AnyEvent) -> None:
        """Once the spans of ``event``, which ended its call's, are made: the rows of
        the call it settles, or of the run it stops, are not needed any more."""
        with self._lock:
            seen = self._runs.get(event.run_id)
            if seen is None:
                return
            if type(event) is ev.Stopped:
                del self._runs[event.run_id]
            elif seen.call_id == event.call_id:
                seen.call_id, seen.call = None, []

    def forget(self) -> None:
        with self._lock:
            self._runs.clear()


RECENT = Recent()


def spans_for(
    rows: Sequence[Event], resource: Resource, *, values: bool | None = None, recent: Recent = RECENT, writer: Written | None = None
) -> list[ReadableSpan]:
    """The spans the stored ``rows`` end, each read as its typed event (the fold's
    reading, runs.models.Event.typed). ``values``: whether arguments and results go
    into the trace (None: as the run's policy says). ``recent``: what this process
    saw stored before them (the rows must be given as they were stored, in order).
    ``writer``: what the process that stored them knew of them, when it is this one:
    the events they were stored from, their decisions and the secrets they were
    masked with, which are then not read or worked out again."""
    spans: list[ReadableSpan] = []
    for index in range(len(rows)):
        stored = _read(rows[index]) if writer is None else writer.stored(index, rows)
        event = stored.event
        ends_call = _ends_call(event)
        spans.extend(_ending(stored, resource, values, recent.see(stored, ends_call), ends_call))
        if ends_call:
            recent.ended(event)
    return spans


def _typed(rows: Iterable[Event]) -> list[ev.AnyEvent]:
    return [row.typed() for row in rows]


def _ending(stored: Stored, resource: Resource, values: bool | None, before: Before, ends_call: bool) -> Iterator[ReadableSpan]:
    event = stored.event
    if type(event) is ev.ModelNote and event.kind == "usage":
        yield _model_span(event, resource, before.previous_ts, stored.secrets)
    elif type(event) is ev.EvidenceRecorded:
        yield _check_span(event, resource, stored.secrets)
    elif type(event) is ev.WaitEnded:
        yield _wait_span(event, resource)
    if event.call_id and ends_call:
        call = _call_span(event, resource, values, before.call)
        if call is not None:
            yield call
    if type(event) is ev.Stopped:
        yield _run_span(event, resource)


def _settles(event: ev.AnyEvent) -> bool:
    """The call was refused, or its attempt's receipt is final."""
    return type(event) in _REFUSING or (type(event) is ev.ReceiptRecorded and event.receipt_status() != "transient")


def _ends_call(event: ev.AnyEvent) -> bool:
    return type(event) is ev.Stopped or _settles(event)


_SAMPLED = TraceFlags(TraceFlags.SAMPLED)


def _context(run_id: str, kind: str, key: object = "") -> SpanContext:
    run = _run_context(run_id)
    if kind == "run":
        return run
    # The run's trace id as its (cached) context holds it, not its UUID parsed again for each span.
    return SpanContext(run.trace_id, span_id_of(run_id, kind, key), is_remote=False, trace_flags=_SAMPLED)


@functools.lru_cache(maxsize=1024)
def _run_context(run_id: str) -> SpanContext:
    """The parent of every span of the run but its own: named at each of them."""
    return SpanContext(trace_id_of(run_id), span_id_of(run_id, "run"), is_remote=False, trace_flags=_SAMPLED)


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
    events: Sequence[Told] = (),
    status: Status | None = None,
    kind: SpanKind = SpanKind.INTERNAL,
    masked_with: Sequence[str] | None = None,
) -> ReadableSpan:
    clean, *told = _masked([_present(attributes), *(event.attributes for event in events)], masked_with)
    return ReadableSpan(
        name=name,
        context=context,
        parent=parent,
        resource=resource,
        attributes=clean,
        events=[SpanEvent(event.name, attributes, timestamp=event.timestamp) for event, attributes in zip(events, told, strict=True)],
        kind=kind,
        status=status or Status(StatusCode.UNSET),
        start_time=_nanos(start),
        end_time=max(_nanos(start), _nanos(end)),
        instrumentation_scope=SCOPE,
    )


class Told(NamedTuple):
    """A span event as its span's maker tells it, masked with the span (``_span``)."""

    name: str
    attributes: Attributes
    timestamp: int


def _masked(sets: list[Attributes], masked_with: Sequence[str] | None) -> list[Attributes]:
    """The attributes of a span and of its events, their values masked once more,
    whatever the log held: a value the secrets list learnt of since the event was
    written is masked too. Their names are Harness's own. All in one look: nearly
    always there is nothing to mask, and ``redact`` then hands the values back as they
    were. ``masked_with``: the secrets every row the values come from was masked with
    as this process stored it (None: not known); with the same secrets now, masking
    again finds nothing (common.redact.masked_alike) and is not done."""
    secrets = secret_values()
    if masked_with is not None and masked_alike(masked_with, secrets):
        return sets
    values = [list(attributes.values()) for attributes in sets]
    clean = redact(values, secrets)
    if clean is values:
        return sets
    return [dict(zip(attributes, masked, strict=True)) for attributes, masked in zip(sets, clean, strict=True)]


def _present(attributes: Attributes) -> Attributes:
    return {key: value for key, value in attributes.items() if value is not None}


def _event(name: str, event: ev.AnyEvent, attributes: Attributes) -> Told:
    return Told(name, _present(attributes), _nanos(event.ts))


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


def _run_event(mark: ev.InvalidInput | ev.KillRequested) -> Told:
    match mark:
        case ev.InvalidInput():
            # Refused by gates 1-3 (parse, resolve, validate) before it was a call: what the model sent is not repeated.
            return _event("harness.gate.decision", mark, {"harness.decision": "invalid_input", "harness.gate": mark.gate})
        case ev.KillRequested():
            return _event("harness.kill", mark, {"harness.kill.by": mark.by, "harness.kill.scope": mark.scope})
        case _:
            assert_never(mark)


def _model_span(note: ev.ModelNote, resource: Resource, previous_ts: datetime | None, masked_with: Sequence[str] | None) -> ReadableSpan:
    run_id = note.run_id
    detail = note.detail
    # The request began when the run's previous event was written: the model is asked
    # right after a step ends.
    before = previous_ts or Event.objects.filter(run_id=run_id, seq__lt=note.seq).order_by("-seq").values_list("ts", flat=True).first()
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
        # The request's start is a time, not a value: what the span tells is the note's.
        masked_with=masked_with,
    )


def _parent_of(event: ev.AnyEvent) -> SpanContext:
    return _context(event.run_id, "call", event.call_id) if event.call_id else _context(event.run_id, "run")


def _check_span(evidence: ev.EvidenceRecorded, resource: Resource, masked_with: Sequence[str] | None) -> ReadableSpan:
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
        masked_with=masked_with,
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


def _call_span(end: ev.AnyEvent, resource: Resource, values: bool | None, seen: Sequence[Stored] | None) -> ReadableSpan | None:
    run_id = end.run_id
    if seen is None:
        seen = [_read(row) for row in Event.objects.filter(run_id=run_id, call_id=end.call_id, seq__lte=end.seq).order_by("seq")]
    log = [stored.event for stored in seen]
    if type(end) is ev.Stopped and any(_settles(event) for event in log[:-1]):
        return None  # its span ended with its own settling event; the stop only names it
    tool = next((name for name in map(tool_of, log) if name), "")
    attributes: Attributes = {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": tool,
        "gen_ai.tool.call.id": end.call_id,
        "gen_ai.tool.type": "function",
        "harness.call.ended_by": end.type,
        "harness.call.executed": any(type(event) is ev.CallStarted for event in log),
    }
    if values if values is not None else _policy_allows_values(run_id):
        attributes.update(_values(log))
    shown = [stored for stored in seen if _shown_in_call(stored.event)]
    ledger = _ledger((stored.row, stored.decision) for stored in shown)
    events = [_decided(_call_event(stored.event), ledger.get(stored.row.seq)) for stored in shown]  # type: ignore[arg-type]  # _shown_in_call narrows
    status = Status(StatusCode.ERROR, "receipt invalid") if type(end) is ev.ReceiptRecorded and not end.valid else None
    secrets = {tuple(stored.secrets) if stored.secrets is not None else None for stored in seen}
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
        # Every row of the call stored here, with the same secrets: what they were masked with.
        masked_with=next(iter(secrets)) if len(secrets) == 1 else None,
    )


def tool_of(event: ev.AnyEvent) -> str:
    """The tool an event of a call names: its own field, or the call's record a
    refusal or a stop carries."""
    kind = type(event)
    name = cast(ev.CheckRequired, event).for_tool if kind is ev.CheckRequired else ""
    if kind in _NAMING_TOOL:
        name = cast(_NamingTool, event).tool
    if not name and kind in _CARRYING_CALL:
        call = cast(_CarryingCall, event).call
        if call is not None:
            return call.tool
    return name


def _values(log: Sequence[ev.AnyEvent]) -> Attributes:
    args = next((cast(_Arguing, event).args for event in log if type(event) in _ARGUING), None)
    receipts = (event.receipt for event in reversed(log) if type(event) is ev.ReceiptRecorded and isinstance(event.receipt, dict))
    result = next((receipt.get("data") for receipt in receipts), None)
    return {
        "gen_ai.tool.call.arguments": _clipped(args) if args is not None else None,
        "gen_ai.tool.call.result": _clipped(result) if result is not None else None,
    }


def _clipped(value: object) -> str:
    return json.dumps(value, sort_keys=True, default=str)[:VALUE_CHARS]


# run id -> whether its policy lets values into its trace. A run keeps the policy
# version it started with, and a version is never changed (approvals.models.PolicyVersion),
# so the answer, once read, holds. Bounded: cleared whole when full.
_VALUES_ALLOWED: dict[str, bool] = {}
_VALUES_KEPT = 10_000


def _policy_allows_values(run_id: str) -> bool:
    allowed = _VALUES_ALLOWED.get(run_id)
    if allowed is None:
        document = Run.objects.filter(pk=run_id).values_list("policy__document", flat=True).first()
        allowed = isinstance(document, dict) and document.get("trace_values") is True
        if len(_VALUES_ALLOWED) >= _VALUES_KEPT:
            _VALUES_ALLOWED.clear()
        _VALUES_ALLOWED[run_id] = allowed
    return allowed


def _shown_in_call(event: ev.AnyEvent) -> bool:
    """A call's span tells its gates' decisions (a secret scan's refusal too), the reviewers' part and its attempts' ends."""
    return type(event) in _SHOWN or type(event) is ev.SecretsFound and event.decision == "refuse"


def ledger_attributes(rows: Iterable[Event]) -> dict[int, Attributes]:
    """The decision ledger's account of each decision among ``rows``, by seq, as the
    attributes of the span event that tells it (docs/design.md, Traces): the kind of
    decision and its outcome, who decided (a policy rule, a person, a person through a
    token, Harness itself), the rule, the policy version, and the digest of what the
    decider was shown, as the decision's ledger entry holds them (runs.persistence.decisions)."""
    return _ledger((row, Ledger.UNREAD) for row in rows)


def _ledger(rows: Iterable[tuple[Event | Shown, Decided | Ledger]]) -> dict[int, Attributes]:
    """``ledger_attributes`` of rows whose decisions may be known already."""
    found: dict[int, Attributes] = {}
    for row, known in rows:
        # A row not read (Shown) comes with its decision known (Written.stored).
        decision = decision_of(cast(Event, row)) if known is Ledger.UNREAD else known
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


def _decided(event: Told, ledger: Attributes | None) -> Told:
    """``event`` with the ledger's account of the decision it tells, if it tells one."""
    if not ledger:
        return event
    return event._replace(attributes={**_present(ledger), **event.attributes})


def _call_event(event: _Shown | ev.SecretsFound) -> Told:
    """A gate's decision or a reviewer's, as the call's span tells it: which rule,
    which policy version, which approval key, who decided; or an attempt's end."""
    # Every case is an isinstance: the two every executed call has come first.
    match event:
        case ev.CallAdmitted():
            return _decision(
                event, {"harness.decision": "admitted", "harness.rule": event.rule, "harness.policy.version": event.policy_version}
            )
        case ev.ReceiptRecorded():
            return _event(
                f"harness.{event.type}", event, {"harness.attempt": event.attempt, "harness.receipt.status": event.receipt_status()}
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
        case ev.Retry():
            return _event(f"harness.{event.type}", event, {"harness.attempt": event.attempt})
        case _:
            assert_never(event)


def _decision(event: _Shown | ev.SecretsFound, attributes: Attributes) -> Told:
    return _event("harness.gate.decision", event, attributes)
