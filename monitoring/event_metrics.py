"""The metrics the event log moves: every stored event passes here once, after the
transaction that stored it commits (a rolled-back step counts nothing), in the
process that wrote it (the worker driving the run, the web server for a decision or
a kill, the beat for an expiry)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

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


def observe(stored: Iterable[tuple[int, ev.AnyEvent]]) -> None:
    """Move the counters and histograms for these stored events (with their seq: the
    typed events the loop wrote are unnumbered)."""
    for seq, event in stored:
        m.EVENTS_WRITTEN.labels(event.type).inc()
        _observe(seq, event)


def _observe(seq: int, event: ev.AnyEvent) -> None:  # noqa: C901 - one case per event type that moves a figure
    match event:
        case ev.RunStarted():
            m.RUNS_STARTED.labels(project_of(event.run_id)).inc()
        case ev.Stopped():
            m.RUNS_ENDED.labels(project_of(event.run_id), event.status).inc()
            if event.status == "killed":
                _observe_kill(event, seq)
        case ev.InvalidInput():
            m.GATE_DECISIONS.labels("invalid", "invalid_input", event.gate).inc()
        case ev.Denied():
            m.GATE_DECISIONS.labels(event.tool, "denied", event.rule).inc()
        case ev.ApprovalRequired():
            m.GATE_DECISIONS.labels(event.tool, "ask", event.rule).inc()
        case ev.CallAdmitted():
            m.GATE_DECISIONS.labels(event.tool, "admitted", event.rule).inc()
        case ev.DuplicateEffect() | ev.WriteBlocked() | ev.CheckRequired():
            tool = event.for_tool if isinstance(event, ev.CheckRequired) else event.tool
            m.GATE_DECISIONS.labels(tool, event.type, "").inc()
        case ev.WaitEnded():
            m.APPROVAL_WAIT.labels(project_of(event.run_id), event.exit).observe(event.waited_seconds)
        case ev.ApprovalLapsed(status="expired"):
            m.APPROVALS_EXPIRED.labels(project_of(event.run_id)).inc()
        case ev.CallStarted():
            if len(_started) >= _STARTED_KEPT:
                _started.clear()
            _started[(event.run_id, event.call_id, event.attempt)] = event.ts
        case ev.ReceiptRecorded():
            started = _started.pop((event.run_id, event.call_id, event.attempt), None)
            if started is not None:
                m.SANDBOX_EXECUTION.labels(event.tool).observe(max(0.0, event.ts - started))
        case ev.ModelNote(kind="usage"):
            _observe_usage(event.run_id, event.detail)
        case _:
            pass


def _observe_usage(run_id: str, detail: dict[str, Any]) -> None:
    model = str(detail.get("model") or "unknown")
    project = project_of(run_id)
    m.MODEL_REQUESTS.labels(model, project).inc()
    for direction in ("input", "output"):
        tokens = detail.get(f"{direction}_tokens")
        if isinstance(tokens, int) and tokens > 0:
            m.MODEL_TOKENS.labels(model, project, direction).inc(tokens)
    cost = detail.get("cost_usd")
    if isinstance(cost, int | float) and cost > 0:
        m.MODEL_COST.labels(model, project).inc(cost)


def _observe_kill(stopped: ev.Stopped, seq: int) -> None:
    """From the newest kill request of the run (written by whoever asked, in another
    process) to this stop: one read, on a rare event."""
    asked = (
        Event.objects.filter(run_id=stopped.run_id, type="kill_requested", seq__lt=seq)
        .order_by("-seq")
        .values_list("ts", "payload")
        .first()
    )
    if asked is None:
        return
    ts, payload = asked
    scope = _kill_scope(payload)
    m.KILL_LATENCY.labels(scope).observe(max(0.0, stopped.ts - ts.timestamp()))


def _kill_scope(payload: object) -> str:
    scope = payload.get("scope") if isinstance(payload, dict) else None
    return scope if scope in ("run", "project", "global") else "run"
