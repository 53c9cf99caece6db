"""The overview: the operation at a glance for operators and project admins, over
the projects where they operate runs (docs/design.md, Overview)."""

from __future__ import annotations

from datetime import datetime
from urllib.parse import urlencode

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.http import require_GET

from common.permissions import OPERATE_RUNS
from monitoring.overview import OUTCOMES, PERIODS, REFUSALS, Overview, Window, overview
from pages import charts
from pages.access import require
from projects.access import scoped
from runs.models import Run

STATES = ("running", "waiting", "queued")
# One colour per meaning, the same in every plot and its legend.
COLOURS = {
    "complete": "#1b7f3b",
    # Finished with something asked undone: not the colour of success.
    "unpublished": "#a3127a",
    "partial": "#3d5a00",
    "tool_denied": "#b3261e",
    "denied": "#b3261e",
    "approval_expired": "#8a4b00",
    "killed": "#5b3cc4",
    "stopped": "#6b6b6b",
    "duplicate_effect": "#0b6a8a",
    "write_blocked": "#8a4b00",
    "check_required": "#5b3cc4",
    "median": "#0b6a8a",
    "95th percentile": "#8fb8c9",
    "running": "#0b6a8a",
    "waiting": "#8a4b00",
    "queued": "#6b6b6b",
}


def runs_url(**query: object) -> str:
    return f"{reverse('runs:list')}?{urlencode({k: v for k, v in query.items() if v not in ('', None)})}"


def _stamp(moment: datetime) -> str:
    return moment.isoformat(timespec="minutes")


def _label(span: Window, moment: datetime) -> str:
    return moment.strftime("%H:%M" if span.period == "24h" else "%b %d")


def _dollars(value: float) -> str:
    return f"${value:,.2f}" if value >= 0.01 or value == 0 else f"${value:.4f}"


def _seconds(value: float) -> str:
    return f"{value:.0f}s" if value < 120 else f"{value / 60:.0f}m" if value < 7200 else f"{value / 3600:.1f}h"


def plots(data: Overview) -> dict[str, object]:
    """Each plot's SVG and legend, every mark a link to the runs list filtered to it."""
    span = data.window
    buckets = span.buckets
    labels = [_label(span, b) for b in buckets]

    def bar_window(i: int) -> dict[str, str]:
        return {"after": _stamp(buckets[i]), "before": _stamp(buckets[i] + span.step)}

    def outcome_href(name: str, i: int) -> str:
        chosen = {"status": "stopped"} if name == "stopped" else {"outcome": name}
        return runs_url(**chosen, **bar_window(i))

    whole = {"after": _stamp(span.start), "before": _stamp(span.end)}
    outcome_names = [name for name in (*OUTCOMES, "stopped") if name in data.outcomes]
    wait_rows = [
        (
            f"{slug} ({count} waits)",
            [
                charts.Segment("median", median, runs_url(project=slug, had="wait_ended", **whole)),
                charts.Segment("95th percentile", p95 - median, runs_url(project=slug, had="wait_ended", **whole)),
            ],
        )
        for slug, (median, p95, count) in data.waits.items()
    ]
    refusal_rows = [
        (tool, [charts.Segment(kind, counts.get(kind, 0), runs_url(had=kind, tool=tool, **whole)) for kind in REFUSALS])
        for tool, counts in data.refusals.items()
    ]
    active_rows = [
        (
            slug,
            [
                charts.Segment(
                    state,
                    counts[state],
                    runs_url(
                        project=slug,
                        status="waiting_approval" if state == "waiting" else "running",
                        queued="on" if state == "queued" else "",
                    ),
                )
                for state in STATES
            ],
        )
        for slug, counts in data.active.items()
    ]
    return {
        "outcomes": charts.columns("Runs ended, by outcome", labels, data.outcomes, outcome_href, colours=COLOURS)
        if data.outcomes
        else None,
        "outcome_legend": charts.legend(outcome_names, COLOURS),
        "waits": charts.bars(
            "Approval wait per project: median, then up to the 95th percentile", wait_rows, ["median", "95th percentile"], _seconds, COLOURS
        )
        if wait_rows
        else None,
        "wait_legend": charts.legend(["median", "95th percentile"], COLOURS),
        "waits_table": [(slug, _seconds(median), _seconds(p95), count) for slug, (median, p95, count) in data.waits.items()],
        "refusals": charts.bars("Refused and duplicate calls per tool", refusal_rows, list(REFUSALS), colours=COLOURS)
        if refusal_rows
        else None,
        "refusal_legend": charts.legend(list(REFUSALS), COLOURS),
        "costs": charts.columns(
            "Model cost per model per bar",
            labels,
            data.costs,
            lambda model, i: runs_url(had="model_note", model=model, **bar_window(i)),
            _dollars,
        )
        if data.costs
        else None,
        "cost_legend": charts.legend(list(data.costs)),
        "cost_total": _dollars(sum(sum(values) for values in data.costs.values())),
        "active": charts.bars("Active and queued runs per project, now", active_rows, list(STATES), colours=COLOURS)
        if active_rows
        else None,
        "active_legend": charts.legend(list(STATES), COLOURS),
    }


@require_GET
@require(OPERATE_RUNS)
def overview_page(request: HttpRequest) -> HttpResponse:
    period = request.GET.get("period", "7d")
    if period not in PERIODS:
        period = "7d"
    data = overview(scoped(Run.objects.all(), request.user, OPERATE_RUNS), period)
    return render(
        request,
        "runs/overview.html",
        {"data": data, "period": period, "periods": list(PERIODS), "plots": plots(data)},
    )
