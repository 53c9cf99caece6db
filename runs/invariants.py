"""The beat's repair of the wait invariants (docs/design.md, Lifecycle): a run in
``waiting_approval`` has exactly one pending request (the one its state waits
for), and an open request belongs to a run waiting for it. Only runs nobody drives
(lease free) are touched; every repair is recorded as an event on the run."""

from __future__ import annotations

from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from approvals.models import ApprovalRequest
from approvals.services import do_lapse
from runs import leases
from runs.core import events as ev
from runs.core.fences import RowLock
from runs.core.lifecycle import OPEN_STATUSES
from runs.eventlog import append_event
from runs.models import Event, Run

Status = ApprovalRequest.Status
BELONGS = "an open request belongs to a run waiting for it"
ONE_PENDING = "a run in waiting_approval has exactly one pending request"
# The beat repairs only runs nobody drives (lease free); a worker that claims one
# meanwhile is ordered with the repair by the run row's lock.
REPAIRING = RowLock("the beat's repair of the wait invariants")


def waited_for(run: Run) -> str | None:
    waiting = (run.state or {}).get("waiting") or {}
    return str(waiting["request_id"]) if "request_id" in waiting else None


def cancel_orphaned_requests() -> int:
    """Cancel open requests that no waiting run waits for (a run that stopped
    without cancelling them, a second request for one wait)."""
    repaired = 0
    undriven = Run.objects.filter(leases.lease_free())
    for request in ApprovalRequest.objects.filter(status__in=OPEN_STATUSES, run__in=undriven).select_related("run"):
        run = request.run
        if run.status == Run.Status.WAITING and waited_for(run) == str(request.pk):
            continue
        why = f"the run is {run.outcome}" if run.status != Run.Status.WAITING else "the run waits for another request"
        # The cancellation and the record of the repair land together.
        with transaction.atomic():
            if do_lapse(request, Status.CANCELLED, f"cancelled by the sweep: {why}", fence=REPAIRING):
                append_event(
                    str(run.pk),
                    ev.InvariantRepaired,
                    fence=REPAIRING,
                    call_id=request.call_id,
                    invariant=BELONGS,
                    repair=f"cancelled: {why}",
                    request_id=str(request.pk),
                )
                repaired += 1
    return repaired


def waits_to_end() -> list[str]:
    """Waiting runs (nobody driving) whose request is no longer pending: each is
    woken so its wait ends the way the lifecycle defines. A wake-up normally follows
    every decision at once; one still missing after a lease period is a broken
    invariant, recorded once per request."""
    now = timezone.now()
    late = now - timedelta(seconds=settings.HARNESS_LEASE_SECONDS)
    wake = []
    for run in Run.objects.filter(status=Run.Status.WAITING).filter(leases.lease_free()):
        request_id = waited_for(run)
        request = ApprovalRequest.objects.filter(pk=request_id).first() if request_id else None
        if request is not None and request.status == Status.PENDING and request.expires_at > now:
            continue
        wake.append(str(run.pk))
        if request is not None and request.status in OPEN_STATUSES:
            continue  # granted and not yet consumed, or pending past expiry: both end on the resume
        since = request.decided_at or request.created_at if request is not None else run.updated_at
        recorded = Event.objects.filter(run=run, type=ev.type_name(ev.InvariantRepaired), payload__request_id=request_id).exists()
        if since <= late and not recorded:
            status = request.status if request is not None else "missing"
            append_event(
                str(run.pk),
                ev.InvariantRepaired,
                fence=REPAIRING,
                invariant=ONE_PENDING,
                repair=f"its request is {status}: woken to end the wait",
                request_id=request_id,
            )
    return wake
