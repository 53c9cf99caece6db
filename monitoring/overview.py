"""What the overview page plots (docs/design.md, Overview): read from the runs and
their event logs over a period, for the projects a user may see. Plain values; the
page draws them (pages/charts.py)."""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from django.db.models import Count, Q, QuerySet
from django.utils import timezone

from core import events as ev
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
REFUSALS = tuple(ev.type_name(kind) for kind in (ev.Denied, ev.DuplicateEffect, ev.WriteBlocked, ev.CheckRequired))
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
    waits = _newest(events.filter(type=ev.type_name(ev.WaitEnded)))
    refusals = _newest(events.filter(type__in=REFUSALS))
    usage = _newest(events.filter(type=ev.type_name(ev.ModelNote)))
    result.clipped = any(len(rows) == MAX_EVENTS for rows in (waits, refusals, usage))
    result.waits = _waits(waits)
    result.refusals = _refusals(refusals)
    result.costs = _costs(usage, span)
    result.active = _active(runs)
    return result


# A stored event's fields, as core.events.parse_event reads them.
_RECORD = ("run_id", "seq", "type", "call_id", "ts", "payload")


def _newest(events: QuerySet[Event]) -> list[tuple[ev.AnyEvent, str]]:
    """The newest ``MAX_EVENTS`` of ``events``, each read as its typed event (the
    fold's reading), with its run's project."""
    rows = events.order_by("-ts").values_list(*_RECORD, "run__project__slug")[:MAX_EVENTS]
    return [(ev.parse_event(dict(zip(_RECORD, row[:-1], strict=True))), row[-1]) for row in rows]


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


def _waits(rows: Iterable[tuple[ev.AnyEvent, str]]) -> dict[str, tuple[float, float, int]]:
    waited: dict[str, list[float]] = defaultdict(list)
    for event, slug in rows:
        if isinstance(event, ev.WaitEnded):
            waited[slug].append(event.waited_seconds)
    result = {}
    for slug in sorted(waited):
        values = sorted(waited[slug])
        result[slug] = (percentile(values, 0.5), percentile(values, 0.95), len(values))
    return result


def _refusals(rows: Iterable[tuple[ev.AnyEvent, str]]) -> dict[str, dict[str, int]]:
    counts: dict[str, Counter[str]] = defaultdict(Counter)
    for event, _ in rows:
        counts[tool_of(event) or "unknown"][event.type] += 1
    ordered = sorted(counts, key=lambda tool: (-sum(counts[tool].values()), tool))
    return {tool: dict(counts[tool]) for tool in ordered}


def _costs(rows: Iterable[tuple[ev.AnyEvent, str]], span: Window) -> dict[str, list[float]]:
    costs: dict[str, list[float]] = {}
    for event, _ in rows:
        if not isinstance(event, ev.ModelNote) or event.kind != "usage" or not isinstance(event.detail.get("cost_usd"), int | float):
            continue
        bars = costs.setdefault(str(event.detail.get("model") or "unknown"), [0.0] * len(span.buckets))
        bars[span.bucket_of(datetime.fromtimestamp(event.ts, tz=UTC))] += float(event.detail["cost_usd"])
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
    rows = _newest(Event.objects.filter(run__in=runs, type__in=types, ts__gte=start, ts__lt=end))
    ids = {
        event.run_id
        for event, _ in rows
        if (not tool or tool_of(event) == tool) and (not model or (isinstance(event, ev.ModelNote) and event.detail.get("model") == model))
    }
    return runs.filter(pk__in=ids)
