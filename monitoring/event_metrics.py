"""The metrics the event log moves: every stored event passes here once, after the
transaction that stored it commits (a rolled-back step counts nothing), in the
process that wrote it (the worker driving the run, the web server for a decision or
a kill, the beat for an expiry)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from prometheus_client.metrics import MetricWrapperBase

from common import metrics as m
from core import events as ev
from runs.models import Event, Run

# (run, call, attempt) -> when the attempt started, until its receipt: the worker
# that starts an attempt is the one that records its receipt.
_started: dict[tuple[str, str | None, int], float] = {}
_STARTED_KEPT = 10_000
# The gates' refusals: the event type is the decision.
_REFUSALS = (ev.DuplicateEffect, ev.WriteBlocked, ev.CheckRequired)


def project_of(run_id: str) -> str:
    slug = m.RUN_PROJECTS.get(run_id)
    if slug is None:
        slug = Run.objects.filter(pk=run_id).values_list("project__slug", flat=True).first() or ""
        m.remember_project(run_id, slug)
    return slug


# (figure, label values) -> its child: what ``labels`` finds each time, looked up
# once per process. As bounded as the labels (common.metrics).
_children: dict[tuple[MetricWrapperBase, tuple[str, ...]], Any] = {}


def _child(figure: MetricWrapperBase, *labels: str) -> Any:
    found = _children.get((figure, labels))
    if found is None:
        found = _children[figure, labels] = figure.labels(*labels)
    return found


def observe(stored: Iterable[tuple[int, ev.AnyEvent]]) -> None:
    """Move the counters and histograms for these stored events (with their seq: the
    typed events the loop wrote are unnumbered)."""
    # A dict, not a Counter: its constructor and its __missing__ are Python's.
    written: dict[str, int] = {}
    for seq, event in stored:
        written[event.type] = written.get(event.type, 0) + 1
        _observe(seq, event)
    # A checkpoint's events by type, one addition each.
    for kind, count in written.items():
        _child(m.EVENTS_WRITTEN, kind).inc(count)


def _observe(seq: int, event: ev.AnyEvent) -> None:  # noqa: C901 - one case per event type that moves a figure
    # On the type's literal, not class patterns: a failed class pattern is an
    # isinstance against a pydantic model's class (ABCMeta's check), about a thousand
    # instructions each, a dozen an event. A step's own events first.
    match event.type:
        case "call_started":
            if len(_started) >= _STARTED_KEPT:
                _started.clear()
            _started[(event.run_id, event.call_id, event.attempt)] = event.ts
        case "receipt_recorded":
            started = _started.pop((event.run_id, event.call_id, event.attempt), None)
            if started is not None:
                _child(m.SANDBOX_EXECUTION, event.tool).observe(max(0.0, event.ts - started))
        case "call_admitted":
            _child(m.GATE_DECISIONS, event.tool, "admitted", event.rule).inc()
        case "run_started":
            _child(m.RUNS_STARTED, project_of(event.run_id)).inc()
        case "stopped":
            _child(m.RUNS_ENDED, project_of(event.run_id), event.status).inc()
            if event.status == "killed":
                _observe_kill(event, seq)
        case "invalid_input":
            _child(m.GATE_DECISIONS, "invalid", "invalid_input", event.gate).inc()
        case "denied":
            _child(m.GATE_DECISIONS, event.tool, "denied", event.rule).inc()
        case "approval_required":
            _child(m.GATE_DECISIONS, event.tool, "ask", event.rule).inc()
        case "duplicate_effect" | "write_blocked" | "check_required":
            tool = event.for_tool if isinstance(event, ev.CheckRequired) else event.tool
            _child(m.GATE_DECISIONS, tool, event.type, "").inc()
        case "wait_ended":
            _child(m.APPROVAL_WAIT, project_of(event.run_id), event.exit).observe(event.waited_seconds)
        case "approval_lapsed" if event.status == "expired":
            _child(m.APPROVALS_EXPIRED, project_of(event.run_id)).inc()
        case "model_note" if event.kind == "usage":
            _observe_usage(event.run_id, event.detail)
        case _:
            pass


def _observe_usage(run_id: str, detail: dict[str, Any]) -> None:
    model = str(detail.get("model") or "unknown")
    project = project_of(run_id)
    _child(m.MODEL_REQUESTS, model, project).inc()
    for direction in ("input", "output"):
        tokens = detail.get(f"{direction}_tokens")
        if isinstance(tokens, int) and tokens > 0:
            _child(m.MODEL_TOKENS, model, project, direction).inc(tokens)
    cost = detail.get("cost_usd")
    if isinstance(cost, int | float) and cost > 0:
        _child(m.MODEL_COST, model, project).inc(cost)


def _observe_kill(stopped: ev.Stopped, seq: int) -> None:
    """From the newest kill request of the run (written by whoever asked, in another
    process) to this stop: one read, on a rare event."""
    row = Event.objects.filter(run_id=stopped.run_id, type=ev.type_name(ev.KillRequested), seq__lt=seq).order_by("-seq").first()
    asked = row.typed() if row is not None else None
    if not isinstance(asked, ev.KillRequested):
        return
    _child(m.KILL_LATENCY, asked.scope).observe(max(0.0, stopped.ts - asked.ts))
