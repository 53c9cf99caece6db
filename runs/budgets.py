"""A project's model budgets per UTC day and month: what its runs started in the day (or
the month) used, from each run's own usage totals (the proposer's, as checkpointed),
and so what is left for one run. A run's model budget is bounded by what its project
has left, less what its other runs of the window used (as they checkpointed it), read
again before every model request: its own use counts against it as it goes, so the project's runs together stay within the project's budget (save for
one request in flight in each run at once). Of that, the project's reserve is kept
back for verification and the report: once the rest is used, the model is told so and
may only run checks and finish (adapters.conversation). A run that would cross the
whole stops ``budget_exhausted``, naming the project's budget, with its report."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from adapters.pricing import Budget
from runs.models import Run


@dataclass(frozen=True)
class Used:
    tokens: int = 0
    cost_usd: float = 0.0


def used_since(project_id: int, since: datetime, other_than: str) -> Used:
    """What the project's runs started since ``since`` used, this run left out: a
    built-in model run's as it checkpointed it, an external agent's as the model proxy
    recorded it in the run's log (runs.agents.usage)."""
    from runs.agents.usage import proxy_used

    tokens, cost = 0, 0.0
    runs = Run.objects.filter(project_id=project_id, created_at__gte=since).exclude(pk=other_than)
    for usage in runs.values_list("state__proposer_state__usage", flat=True):
        if isinstance(usage, dict):
            tokens += int(usage.get("input_tokens") or 0) + int(usage.get("output_tokens") or 0)
            cost += float(usage.get("cost_usd") or 0.0)
    proxied_tokens, proxied_cost = proxy_used(runs)
    return Used(tokens + proxied_tokens, cost + proxied_cost)


def project_bound(run: Run, now: datetime) -> Budget:
    """The most the run may use of its project's daily and monthly budgets now."""
    project = run.project
    day = now.replace(hour=0, minute=0, second=0, microsecond=0)
    windows = [
        ("daily", day, project.daily_max_tokens, project.daily_max_cost_usd),
        ("monthly", day.replace(day=1), project.monthly_max_tokens, project.monthly_max_cost_usd),
    ]
    bound = Budget(reserve_tokens=project.reserve_tokens, reserve_cost_usd=project.reserve_cost_usd)
    for name, since, max_tokens, max_cost in windows:
        if max_tokens is None and max_cost is None:
            continue
        used = used_since(project.pk, since, str(run.pk))
        left_tokens = max(0, max_tokens - used.tokens) if max_tokens is not None else None
        left_cost = max(0.0, max_cost - used.cost_usd) if max_cost is not None else None
        whose = f"what is left of project {project.slug}'s {name} budget"
        bound = bound.intersect(Budget(left_tokens, left_cost, f"{whose} of {max_tokens} tokens", f"{whose} of ${max_cost}"))
    return bound
