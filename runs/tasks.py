"""Celery tasks: thin wrappers around ``runs.runtime.advance``."""

from __future__ import annotations

from celery import shared_task

from runs import leases
from runs.models import Run
from runs.runtime import advance


@shared_task(name="runs.start_run", acks_late=True, reject_on_worker_lost=True)
def start_run(run_id: str) -> str:
    return advance(run_id)


@shared_task(name="runs.resume_run", acks_late=True, reject_on_worker_lost=True)
def resume_run(run_id: str) -> str:
    return advance(run_id)


@shared_task(name="runs.sweep_leases")
def sweep_leases() -> list[str]:
    """Resume runs whose driver died (lease expired while running), and waiting runs
    that a decision or a kill should have woken but whose wake-up was lost."""
    orphans = leases.expired_active_runs()
    # A wake-up is lost when it reaches a worker while a dead worker's lease still
    # holds the run: so look for waiting runs with something to act on, free or not.
    undriven = Run.objects.filter(status=Run.Status.WAITING).filter(leases.lease_free())
    woken = list(undriven.filter(kill_requested=True).values_list("pk", flat=True)) + list(
        undriven.filter(approval_requests__status__in=["granted", "denied"]).distinct().values_list("pk", flat=True)
    )
    targets = sorted(set(orphans) | {str(pk) for pk in woken})
    for run_id in targets:
        resume_run.delay(run_id)
    return targets
