"""What the overview page plots (docs/design.md, Overview): read from the runs and
their event logs over a period, for the projects a user may see. Plain values; the
page draws them (pages/charts.py)."""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.db.models import Count, Q, QuerySet
from django.utils import timezone

from monitoring.spans import tool_of
from runs.models import Event, Run

# The periods offered, and the width of one bar in each.
PERIODS: dict[str, tuple[timedelta, timedelta]] = {
    "24h": (timedelta(hours=24), timedelta(hours=1)),
    "7d": (timedelta(days=7), timedelta(days=1)),
    "30d": (timedelta(days=30), timedelta(days=1)),
}
# The outcomes drawn apart; every other stop is "stopped".
OUTCOMES = ("complete", "unpublished", "partial", "tool_denied", "denied", "approval_expired", "killed")
REFUSALS = ("denied", "duplicate_effect", "write_blocked", "check_required")
# The most events one plot reads: a period with more is drawn from its newest ones
# (and says so).
MAX_EVENTS = 50_000


@dataclass(frozen=True)
class Window:
    period: str
    start: datetime
    end: datetime
    step: timedelta

    @property
    def buckets(self) -> list[datetime]:
        count = math.ceil((self.end - self.start) / self.step)
        return [self.start + i * self.step for i in range(count)]

    def bucket_of(self, moment: datetime) -> int:
        return min(int((moment - self.start) / self.step), len(self.buckets) - 1)


def window(period: str, now: datetime | None = None) -> Window:
    """The period ending now, aligned to its bars (a bar is a whole hour or day)."""
    if period not in PERIODS:
        raise ValueError(f"period must be one of {', '.join(PERIODS)}; got {period!r}")
    length, step = PERIODS[period]
    now = now or timezone.now()
    unit = 3600 if step == timedelta(hours=1) else 86400
    end = datetime.fromtimestamp((now.timestamp() // unit + 1) * unit, tz=now.tzinfo)
    return Window(period, end - length, end, step)


@dataclass
class Overview:
    window: Window
    # outcome -> a count per bar
    outcomes: dict[str, list[int]] = field(default_factory=dict)
    # project -> (median, p95, requests)
    waits: dict[str, tuple[float, float, int]] = field(default_factory=dict)
    # tool -> refusal -> count
    refusals: dict[str, dict[str, int]] = field(default_factory=dict)
    # model -> cost per bar (USD)
    costs: dict[str, list[float]] = field(default_factory=dict)
    # project -> state -> count, now
    active: dict[str, dict[str, int]] = field(default_factory=dict)
    clipped: bool = False

    @property
    def version(self) -> str:
        """What the page's live region compares: it is redrawn only when this moves."""
        return str(hash((repr(self.outcomes), repr(self.waits), repr(self.refusals), repr(self.costs), repr(self.active))))


def overview(runs: QuerySet[Run], period: str, now: datetime | None = None) -> Overview:
    """The figures of ``runs`` (already scoped to the viewer's projects) over the period."""
    span = window(period, now)
    result = Overview(span)
    result.outcomes = _outcomes(runs, span)
    events = Event.objects.filter(run__in=runs, ts__gte=span.start, ts__lt=span.end)
    waits = _newest(events.filter(type="wait_ended"), ("run__project__slug", "payload"))
    refusals = _newest(events.filter(type__in=REFUSALS), ("type", "payload"))
    usage = _newest(events.filter(type="model_note"), ("ts", "payload"))
    result.clipped = any(len(rows) == MAX_EVENTS for rows in (waits, refusals, usage))
    result.waits = _waits(waits)
    result.refusals = _refusals(refusals)
    result.costs = _costs(usage, span)
    result.active = _active(runs)
    return result


def _newest(events: QuerySet[Event], columns: Sequence[str]) -> list[tuple[Any, ...]]:
    return list(events.order_by("-ts").values_list(*columns)[:MAX_EVENTS])


def outcome_group(outcome: str) -> str:
    return outcome if outcome in OUTCOMES else "stopped"


def _outcomes(runs: QuerySet[Run], span: Window) -> dict[str, list[int]]:
    """Runs that ended in the period, by outcome, per bar of their end (the run's last
    change: an ended run changes no more)."""
    ended = runs.filter(status__in=[Run.Status.COMPLETE, Run.Status.STOPPED], updated_at__gte=span.start, updated_at__lt=span.end)
    counts: dict[str, list[int]] = {}
    for outcome, moment in ended.values_list("outcome", "updated_at"):
        bars = counts.setdefault(outcome_group(outcome), [0] * len(span.buckets))
        bars[span.bucket_of(moment)] += 1
    return {name: counts[name] for name in (*OUTCOMES, "stopped") if name in counts}


def percentile(values: Sequence[float], share: float) -> float:
    """The nearest-rank percentile of sorted ``values``."""
    rank = max(1, math.ceil(share * len(values)))
    return values[rank - 1]


def _waits(rows: Iterable[tuple[Any, ...]]) -> dict[str, tuple[float, float, int]]:
    waited: dict[str, list[float]] = defaultdict(list)
    for slug, payload in rows:
        seconds = payload.get("waited_seconds") if isinstance(payload, dict) else None
        if isinstance(seconds, int | float):
            waited[slug].append(float(seconds))
    result = {}
    for slug in sorted(waited):
        values = sorted(waited[slug])
        result[slug] = (percentile(values, 0.5), percentile(values, 0.95), len(values))
    return result


def _refusals(rows: Iterable[tuple[Any, ...]]) -> dict[str, dict[str, int]]:
    counts: dict[str, Counter[str]] = defaultdict(Counter)
    for kind, payload in rows:
        counts[tool_of(payload) or "unknown"][kind] += 1
    ordered = sorted(counts, key=lambda tool: (-sum(counts[tool].values()), tool))
    return {tool: dict(counts[tool]) for tool in ordered}


def _costs(rows: Iterable[tuple[Any, ...]], span: Window) -> dict[str, list[float]]:
    costs: dict[str, list[float]] = {}
    for moment, payload in rows:
        detail = payload.get("detail") if isinstance(payload, dict) and payload.get("kind") == "usage" else None
        if not isinstance(detail, dict) or not isinstance(detail.get("cost_usd"), int | float):
            continue
        bars = costs.setdefault(str(detail.get("model") or "unknown"), [0.0] * len(span.buckets))
        bars[span.bucket_of(moment)] += float(detail["cost_usd"])
    return dict(sorted(costs.items()))


def _active(runs: QuerySet[Run]) -> dict[str, dict[str, int]]:
    active: dict[str, dict[str, int]] = defaultdict(dict)
    rows = (
        runs.filter(status__in=[Run.Status.RUNNING, Run.Status.WAITING])
        .values_list("project__slug")
        .annotate(
            running=Count("pk", filter=Q(status=Run.Status.RUNNING, queued=False)),
            waiting=Count("pk", filter=Q(status=Run.Status.WAITING)),
            queued=Count("pk", filter=Q(queued=True)),
        )
    )
    for slug, running, waiting, queued in rows:
        active[slug] = {"running": running, "waiting": waiting, "queued": queued}
    return dict(sorted(active.items()))


def runs_with_events(
    runs: QuerySet[Run], types: Sequence[str], start: datetime, end: datetime, *, tool: str = "", model: str = ""
) -> QuerySet[Run]:
    """The runs behind a bar of the refusals or the costs: those with such an event in
    the period (for this tool, or a request to this model)."""
    rows = _newest(Event.objects.filter(run__in=runs, type__in=types, ts__gte=start, ts__lt=end), ("run_id", "payload"))
    ids = {
        run_id
        for run_id, payload in rows
        if (not tool or tool_of(payload) == tool)
        and (
            not model or (isinstance(payload, dict) and isinstance(payload.get("detail"), dict) and payload["detail"].get("model") == model)
        )
    }
    return runs.filter(pk__in=ids)
