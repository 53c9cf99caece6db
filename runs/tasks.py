"""Celery tasks: thin wrappers around ``runs.runtime.advance`` and the sweeps of the
beat (leases, approvals past their deadline, the sandbox's orphaned containers,
artifacts past their retention)."""

from __future__ import annotations

from celery import shared_task
from django.conf import settings
from django.utils import timezone

from runs import container_sweep, invariants
from runs import project_queue as admission
from runs.approval_flow.flow import expire_due
from runs.models import Run
from runs.persistence import retention
from runs.runtime import advance
from runs.scheduling import leases, queue


@shared_task(name="runs.start_run", acks_late=True, reject_on_worker_lost=True)
def start_run(run_id: str) -> str:
    return advance(run_id)


@shared_task(name="runs.resume_run", acks_late=True, reject_on_worker_lost=True)
def resume_run(run_id: str) -> str:
    return advance(run_id)


@shared_task(name="runs.dispatch")
def dispatch(project_id: int) -> list[str]:
    """Admit a project's queued runs while it has free slots (runs.project_queue)."""
    return admission.dispatch(project_id)


@shared_task(name="runs.sweep_leases")
def sweep_leases() -> list[str]:
    """Resume runs whose driver died (lease expired while running), and waiting runs
    that a decision, a lapse, a policy save or a kill should have woken but whose
    wake-up was lost; cancel open requests no waiting run waits for, and lapse those
    asked under a replaced policy (runs.invariants)."""
    orphans = leases.expired_active_runs()
    # A wake-up is lost when it reaches a worker while a dead worker's lease still
    # holds the run: so look for waiting runs with something to act on, free or not.
    undriven = Run.objects.filter(status=Run.Status.WAITING).filter(leases.lease_free())
    killed = [str(pk) for pk in undriven.filter(kill_requested=True).values_list("pk", flat=True)]
    invariants.cancel_orphaned_requests()
    invariants.lapse_stale_requests()  # before waits_to_end, which then wakes their runs
    # Queued runs killed whose wake-up was lost are stopped by their driver too.
    killed += [
        str(pk) for pk in Run.objects.filter(queued=True, kill_requested=True).filter(leases.lease_free()).values_list("pk", flat=True)
    ]
    # A queue whose dispatch was lost (a broker away when a slot freed) moves on.
    admission.sweep()
    targets = sorted(set(orphans) | set(killed) | set(invariants.waits_to_end()))
    for run_id in targets:
        # To the host that holds the run's workspace while it lives (runs/scheduling/hosts.py).
        queue.enqueue_resume(run_id)
    return targets


@shared_task(name="approvals.expire")
def expire_approvals() -> int:
    """Lapse the requests past their deadline and wake their runs (runs.approval_flow.flow)."""
    return expire_due()


@shared_task(name="sandbox.sweep")
def sweep_containers() -> list[str]:
    """Remove the containers of runs that ended or that nobody drives (runs.container_sweep)."""
    return container_sweep.sweep(settings.SANDBOX_SCOPE)


@shared_task(name="runs.delete_expired_artifacts")
def delete_expired_artifacts() -> int:
    """Retention (``HARNESS_ARTIFACT_RETENTION_DAYS``): how many artifacts went."""
    return retention.delete_expired_artifacts(settings.HARNESS_ARTIFACT_RETENTION_DAYS, timezone.now()).artifacts
