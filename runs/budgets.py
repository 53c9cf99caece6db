"""A project's model budgets per UTC day and month: what its runs started in the day (or
the month) used, from each run's own usage totals (the proposer's, as checkpointed),
and so what is left for one run. A run's model budget is bounded by what its project
has left, less what its other runs of the window used (as they checkpointed it), read
again before every model request: its own use counts against it as it goes, so the project's runs together stay within the project's budget (save for
one request in flight in each run at once). Of that, the project's reserve is kept
back for verification and the report: once the rest is used, the model is told so and
may only run checks and finish (adapters.conversation). A run that would cross the
whole stops ``budget_exhausted``, naming the project's budget, with its report.

Both windows are read in one statement (the runs of the month, each counted in the
windows it started in), and the model proxy adds its run's own totals to that same
statement (runs.agents.usage.check)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from adapters.pricing import Budget, UsageTotals
from runs.models import Run

if TYPE_CHECKING:
    from django.db.models import Q, QuerySet

    from projects.models import Project


@dataclass(frozen=True)
class Used:
    tokens: int = 0
    cost_usd: float = 0.0


@dataclass(frozen=True)
class Window:
    """A budget of the project's: its name, where it starts, its limits."""

    name: str
    since: datetime
    max_tokens: int | None
    max_cost_usd: float | None


def windows(project: Project, now: datetime) -> list[Window]:
    """The project's budgets that are set, for the day and the month of ``now``."""
    day = now.replace(hour=0, minute=0, second=0, microsecond=0)
    every = [
        Window("daily", day, project.daily_max_tokens, project.daily_max_cost_usd),
        Window("monthly", day.replace(day=1), project.monthly_max_tokens, project.monthly_max_cost_usd),
    ]
    return [w for w in every if w.max_tokens is not None or w.max_cost_usd is not None]


def others_in(project_id: int, opened: Sequence[Window], other_than: str) -> Q | None:
    """The project's other runs the budgets ``opened`` count (those started since the
    earliest's start), or None if no budget is set."""
    from django.db.models import Q

    if not opened:
        return None
    return Q(project_id=project_id, created_at__gte=min(w.since for w in opened)) & ~Q(pk=other_than)


def usage_of(runs: QuerySet[Run]) -> Iterator[tuple[str, datetime, Used, UsageTotals]]:
    """Each run's id, start and use, in one statement: a built-in model run's as it
    checkpointed it plus an external agent's as the model proxy recorded it in the
    run's log (runs.agents.usage); and the proxy's totals alone."""
    from runs.agents.usage import newest_proxy_note, proxy_totals

    found = runs.annotate(proxy_note=newest_proxy_note()).values_list("pk", "created_at", "state__proposer_state__usage", "proxy_note")
    for pk, created_at, checkpointed, note in found:
        proxied = proxy_totals(note)
        tokens, cost = proxied.tokens, proxied.cost_usd
        if isinstance(checkpointed, dict):
            tokens += int(checkpointed.get("input_tokens") or 0) + int(checkpointed.get("output_tokens") or 0)
            cost += float(checkpointed.get("cost_usd") or 0.0)
        yield str(pk), created_at, Used(tokens, cost), proxied


def bound(project: Project, opened: Sequence[Window], runs: Iterable[tuple[datetime, Used]]) -> Budget:
    """The most a run may use of the project's budgets ``opened``, its other runs
    (each by its start and use) having used theirs."""
    used = {w.name: Used() for w in opened}
    for created_at, one in runs:
        for window in opened:
            if created_at >= window.since:
                so_far = used[window.name]
                used[window.name] = Used(so_far.tokens + one.tokens, so_far.cost_usd + one.cost_usd)
    limit = Budget(reserve_tokens=project.reserve_tokens, reserve_cost_usd=project.reserve_cost_usd)
    for window in opened:
        spent = used[window.name]
        left_tokens = max(0, window.max_tokens - spent.tokens) if window.max_tokens is not None else None
        left_cost = max(0.0, window.max_cost_usd - spent.cost_usd) if window.max_cost_usd is not None else None
        whose = f"what is left of project {project.slug}'s {window.name} budget"
        limit = limit.intersect(
            Budget(left_tokens, left_cost, f"{whose} of {window.max_tokens} tokens", f"{whose} of ${window.max_cost_usd}")
        )
    return limit


def project_bound(run: Run, now: datetime) -> Budget:
    """The most the run may use of its project's daily and monthly budgets now."""
    project = run.project
    opened = windows(project, now)
    others = others_in(project.pk, opened, str(run.pk))
    rows = [] if others is None else [(created_at, used) for _, created_at, used, _ in usage_of(Run.objects.filter(others))]
    return bound(project, opened, rows)
