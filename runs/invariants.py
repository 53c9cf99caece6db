"""The beat's repair of the wait invariants (docs/design.md, Lifecycle): a run in
``waiting_approval`` has exactly one pending, decidable request (the one its state
waits for), and an open request belongs to a run waiting for it. Only runs nobody
drives (lease free) are touched, except a request asked under a replaced policy,
which no run can use whoever drives it; every repair is recorded as an event on
the run."""

from __future__ import annotations

from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from approvals.models import ApprovalRequest
from core import events as ev
from core.fences import RowLock
from core.lifecycle import OPEN_STATUSES
from runs.approval_flow.flow import do_lapse, lapse_stale, newest_in_run_project
from runs.models import Event, Run
from runs.persistence.eventlog import append_event
from runs.scheduling import leases

Status = ApprovalRequest.Status
BELONGS = "an open request belongs to a run waiting for it"
ONE_PENDING = "a run in waiting_approval has exactly one pending request"
DECIDABLE = "a pending request was asked under the policy in force"
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
                _record_repair(request, BELONGS, f"cancelled: {why}")
                repaired += 1
    return repaired


def _record_repair(request: ApprovalRequest, invariant: str, repair: str) -> None:
    append_event(
        str(request.run_id),
        ev.InvariantRepaired,
        fence=REPAIRING,
        call_id=request.call_id,
        invariant=invariant,
        repair=repair,
        request_id=str(request.pk),
    )


def lapse_stale_requests() -> int:
    """Lapse the pending requests asked under a policy older than the one in force in
    their run's project. Saving a version lapses them at once
    (runs.approval_flow.flow.save_policy_version); these are the ones that missed it: a
    version saved some other way, or a request filed by a worker that read the policy
    just before the save. ``waits_to_end`` then wakes their runs, so each call goes
    back through the gates."""
    repaired = 0
    behind = ApprovalRequest.objects.annotate(current=newest_in_run_project()).filter(
        status=Status.PENDING, policy_version__lt=F("current")
    )
    for request in behind:
        current = request.current
        # The lapse and the record of the repair land together.
        with transaction.atomic():
            if lapse_stale(request, current, fence=REPAIRING):
                _record_repair(request, DECIDABLE, f"stale: asked under policy v{request.policy_version}, v{current} is in force")
                repaired += 1
    return repaired


def waited_request(run: Run) -> ApprovalRequest | None:
    request_id = waited_for(run)
    return ApprovalRequest.objects.filter(pk=request_id).first() if request_id else None


def keeps_waiting(request: ApprovalRequest | None) -> bool:
    """The request a run waits for can still end its wait by a decision: pending and
    not expired. Any other (decided, lapsed, missing) means the run must be woken."""
    return request is not None and request.status == Status.PENDING and request.expires_at > timezone.now()


def wake_was_missed(run_id: str) -> bool:
    """For the worker that just released the run's lease: the run waits, but a kill or
    the end of its request came while the lease was held, and its wake-up, finding the
    lease taken, was dropped."""
    run = Run.objects.filter(pk=run_id, status=Run.Status.WAITING).first()
    return run is not None and (run.kill_requested or not keeps_waiting(waited_request(run)))


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
        request = waited_request(run)
        if keeps_waiting(request):
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
