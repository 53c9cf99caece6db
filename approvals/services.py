"""Approval requests: filing them for the loop, and the grant / deny / expire /
consume services, each with one audited event. ``check_*`` raise DecisionRefused
with a message for the reviewer; ``do_*`` assume the checks passed. The run's side
(its event log, where it stands) is reached through approvals.ports."""

from __future__ import annotations

from datetime import timedelta
from typing import Any, Literal

from django.contrib.auth.models import AnonymousUser, User
from django.db import IntegrityError, transaction
from django.db.models import Max, QuerySet, Subquery
from django.utils import timezone

from approvals.models import ApprovalRequest, PolicyVersion
from approvals.policies import current_policy_row, load_policy, self_approval_on
from approvals.ports import OwnedRun, runs
from approvals.signals import wait_may_end
from common import permissions
from common.redact import MASK
from core import events as ev
from core.fences import Fence, RowLock, driver_fence
from core.lifecycle import OPEN_STATUSES, check_lapse, check_request_transition, sources_of
from core.patchtext import preview_problem
from core.ports import ApprovalAsk, Filed, RequestState

Status = ApprovalRequest.Status


# A reviewer's decision and the beat's expiry do not drive the run: the conditional
# UPDATE of the request decides whether they write, the run row's lock orders the event.
DECIDING = RowLock("a reviewer's decision")
EXPIRING = RowLock("the beat's expiry of requests")
SAVING = RowLock("an admin's policy save")


class DecisionRefused(Exception):
    """The request cannot be decided now (already decided, expired, stale). ``lapse``
    is the (status, reason) a decision attempt records for an expired or stale one."""

    def __init__(self, message: str, lapse: tuple[str, str] | None = None) -> None:
        super().__init__(message)
        self.lapse = lapse


class DecisionForbidden(DecisionRefused):
    """This user may not decide this request (no reviewer permission, or it is their own run)."""


class DjangoApprovals:
    """The loop's approval gate backed by ApprovalRequest rows. What it writes into
    the run's log (a lapse, a cancellation) is the driver's, fenced by its lease."""

    def __init__(self, run: OwnedRun, lease_token: int | None = None) -> None:
        self.run = run
        self.fence = driver_fence(lease_token)

    def request(self, ask: ApprovalAsk) -> Filed:
        now = timezone.now()
        # After a crash between filing and the run's checkpoint, the same call finds
        # the request it already filed instead of filing a second one.
        pending = ApprovalRequest.objects.filter(run_id=ask.run_id, key=ask.key, status=Status.PENDING, expires_at__gt=now).first()
        if pending is not None:
            return Filed(str(pending.pk), new=False)
        request = ApprovalRequest.objects.create(
            run_id=ask.run_id,
            call_id=ask.call_id,
            tool=ask.tool,
            args=dict(ask.args),
            revision=ask.revision,
            policy_version=ask.policy_version,
            key=ask.key,
            rule=ask.rule,
            diff=ask.diff or "",
            effect=dict(ask.effect) if ask.effect is not None else None,
            evidence=[dict(e) for e in ask.evidence],
            requested_by=self.run.created_by,
            expires_at=now + timedelta(seconds=ask.expires_in_seconds),
        )
        return Filed(str(request.pk), new=True)

    def state(self, request_id: str) -> RequestState:
        row = ApprovalRequest.objects.get(pk=request_id)
        due = row.status in OPEN_STATUSES and row.expires_at <= timezone.now()
        return RequestState(str(row.pk), row.status, row.reason, row.consumed_by_call, due)

    def consume(self, request_id: str, call_id: str) -> bool:
        return do_consume(request_id, call_id)

    def lapse(self, request_id: str, status: Literal["expired", "stale"], reason: str) -> bool:
        return do_lapse(ApprovalRequest.objects.get(pk=request_id), status, reason, fence=self.fence)

    def cancel_open(self, run_id: str, reason: str) -> list[str]:
        return cancel_open_requests(run_id, reason, fence=self.fence)


def do_consume(request_id: Any, call_id: str) -> bool:
    """Use a granted approval once. The conditional UPDATE is the lock: of any number
    of concurrent consumers exactly one sees a row count of 1."""
    now = timezone.now()
    updated = ApprovalRequest.objects.filter(pk=request_id, status=Status.GRANTED, expires_at__gt=now).update(
        status=Status.CONSUMED, consumed_at=now, consumed_by_call=call_id
    )
    return updated == 1


def cancel_open_requests(run_id: str, reason: str, *, fence: Fence) -> list[str]:
    """Every open request of a stopped run leaves the queue, each with an event."""
    cancelled = []
    for request in ApprovalRequest.objects.filter(run_id=run_id, status__in=OPEN_STATUSES):
        if do_lapse(request, Status.CANCELLED, reason, fence=fence):
            cancelled.append(str(request.pk))
    return cancelled


def staleness(request: ApprovalRequest) -> str | None:
    """Why a request no longer describes what would run, or None if it still does.
    Gates decide under the policy now in force, so a newer policy makes it stale."""
    run = runs().standing(str(request.run_id))
    current = current_policy_row().version
    if current != request.policy_version:
        return f"the policy is now v{current}, the request was for v{request.policy_version}"
    if run.revision != request.revision:
        return f"the workspace is at {run.revision[:12]}, the request was for {request.revision[:12]}"
    if not run.waiting or run.stopping:
        state = "being stopped" if run.stopping else run.outcome
        return f"the run is {state}, no longer waiting for this approval"
    return None


def check_decision(request: ApprovalRequest, user: User | AnonymousUser, *, granting: bool = False) -> None:
    if not user.is_authenticated or not user.has_perm(permissions.DECIDE_APPROVALS):
        raise DecisionForbidden("you do not have the reviewer permission")
    run = request.run
    policy = load_policy(current_policy_row())
    if run.created_by_id == user.pk and not self_approval_on(policy):
        raise DecisionForbidden("you started this run; another reviewer must decide (separation of duties)")
    if request.status != Status.PENDING:
        raise DecisionRefused(f"this request is already {request.status}")
    if request.expires_at <= timezone.now():
        raise DecisionRefused("this request has expired", lapse=(Status.EXPIRED, "expired before a decision"))
    stale = staleness(request)
    if stale is not None:
        raise DecisionRefused(f"this request is stale: {stale}", lapse=(Status.STALE, stale))
    # A grant approves what the reviewer saw; a diff that is not the whole, exact
    # patch (masking changed its lines, or it leaves changes out) cannot be granted.
    # It can still be denied, so the run hears why.
    problem = preview_problem(request.diff, MASK) if granting else None
    if problem is not None:
        raise DecisionRefused(f"this request cannot be granted as it is: {problem}, so the diff shown is not exactly what would ship")


def check_decision_recording_lapse(request: ApprovalRequest, user: User | AnonymousUser, *, granting: bool = False) -> None:
    """``check_decision`` for a decision being made: a refusal because the request
    expired or went stale is recorded (and audited) before it is raised."""
    try:
        check_decision(request, user, granting=granting)
    except DecisionRefused as exc:
        # The run's wait has ended with the lapse: wake it, so it leaves the wait now.
        if exc.lapse is not None and do_lapse(request, *exc.lapse, fence=DECIDING):
            wake_after_commit(str(request.run_id))
        raise


def _decide(request: ApprovalRequest, user: User | AnonymousUser, status: str, reason: str) -> None:
    # Only a still-pending row can be decided: a concurrent decision, expiry or
    # cancellation wins or loses as a whole, never half.
    check_request_transition(Status.PENDING, status)
    with transaction.atomic():
        updated = ApprovalRequest.objects.filter(pk=request.pk, status=Status.PENDING).update(
            status=status, decided_by=user, decided_at=timezone.now(), reason=reason
        )
        if updated != 1:
            raise DecisionRefused("this request was decided by someone else a moment ago")
        decision = "granted" if status == Status.GRANTED else "denied"
        runs().append_event(
            str(request.run_id),
            ev.ApprovalDecided,
            fence=DECIDING,
            call_id=request.call_id,
            request_id=str(request.pk),
            decision=decision,
            by=user.get_username(),
            reason=reason,
            self_approved=request.run.created_by_id == user.pk,
        )
        wake_after_commit(str(request.run_id))


def grant(request: ApprovalRequest, user: User | AnonymousUser, comment: str = "") -> None:
    check_decision_recording_lapse(request, user, granting=True)
    _decide(request, user, Status.GRANTED, comment.strip())


def check_reason(reason: str) -> str:
    reason = reason.strip()
    if not reason:
        raise DecisionRefused("a denial needs a reason")
    return reason


def deny(request: ApprovalRequest, user: User | AnonymousUser, reason: str) -> None:
    reason = check_reason(reason)
    check_decision_recording_lapse(request, user)
    _decide(request, user, Status.DENIED, reason)


def do_lapse(request: ApprovalRequest, status: str, reason: str, *, fence: Fence) -> bool:
    """End an open request (expired, stale, cancelled) with its event, together: a
    fence that refuses the event (a lease taken over) rolls the lapse back too.
    The request may be pending or granted (and not yet used) by now, whatever the
    row in hand says: the UPDATE moves it only from a status the lifecycle lets
    reach ``status``."""
    check_lapse(status)
    with transaction.atomic():
        # decided_at also says when a request lapsed: the system decided it.
        updated = ApprovalRequest.objects.filter(pk=request.pk, status__in=sources_of(status)).update(
            status=status, reason=reason, decided_at=timezone.now()
        )
        if updated == 1:
            runs().append_event(
                str(request.run_id),
                ev.ApprovalLapsed,
                fence=fence,
                call_id=request.call_id,
                request_id=str(request.pk),
                status=status,
                reason=reason,
            )
    return updated == 1


def expire_due() -> int:
    """Expire requests past their TTL; their runs are resumed, and stop ``approval_expired``."""
    due = ApprovalRequest.objects.filter(status__in=[Status.PENDING, Status.GRANTED], expires_at__lte=timezone.now())
    count = 0
    for request in due:
        if do_lapse(request, Status.EXPIRED, "no decision before the deadline", fence=EXPIRING):
            count += 1
            wake_after_commit(str(request.run_id))
    return count


def wake_after_commit(run_id: str) -> None:
    """The run's wait may be over: once this transaction commits, whoever drives runs
    is told (approvals.signals.wait_may_end)."""
    transaction.on_commit(lambda: wait_may_end.send(sender=ApprovalRequest, run_id=run_id))


def pending_requests() -> QuerySet[ApprovalRequest]:
    """What reviewers can still decide: pending, not expired, asked under the policy
    in force, and its run waiting for it at the revision it was asked for (a run being
    stopped cancels its requests; this keeps them out meanwhile). A stale request never
    counts as waiting, not even before its lapse is recorded."""
    newest = PolicyVersion.objects.order_by("-version").values("version")[:1]
    return ApprovalRequest.objects.filter(
        runs().waiting_for_decision(), status=Status.PENDING, expires_at__gt=timezone.now(), policy_version=Subquery(newest)
    ).order_by("created_at")


# -- policy versions ---------------------------------------------------------------------


def lapse_stale(request: ApprovalRequest, current: int, *, fence: Fence) -> bool:
    """A pending request asked under a policy older than v``current`` can no longer be
    granted (gates decide under the policy in force): it lapses ``stale``."""
    return do_lapse(request, Status.STALE, f"policy v{current} replaced v{request.policy_version} while the request waited", fence=fence)


def save_policy_version(row: PolicyVersion, document: dict[str, Any]) -> list[str]:
    """Save ``row`` (note and author set, ``document`` checked) as the newest version.
    Every run decides under it from now on, so each pending request asked under an
    older version lapses stale in the same transaction (no page or count read after
    the save shows it waiting) and its run is woken once that commits: the waiting
    call goes back through the gates at once (docs/design.md, Approvals). A wake-up
    lost on the way, or a request filed under the old version by a worker that read
    it just before, is the beat's sweep's (runs.invariants.lapse_stale_requests).
    Returns the ids of the requests it made stale."""
    for _ in range(3):
        try:
            # Two admins saving at once both compute max+1; the unique version lets
            # one win and the other retry with the next number. The lapses are in
            # the same transaction, so a lost race undoes them too.
            with transaction.atomic():
                latest = PolicyVersion.objects.aggregate(v=Max("version"))["v"] or 0
                row.version = latest + 1
                row.document = {**document, "version": row.version}
                row.save()
                stale = []
                for request in ApprovalRequest.objects.filter(status=Status.PENDING, policy_version__lt=row.version):
                    if lapse_stale(request, row.version, fence=SAVING):
                        stale.append(str(request.pk))
                        wake_after_commit(str(request.run_id))
            return stale
        except IntegrityError:
            row.pk = None
    raise IntegrityError("could not allocate a policy version number")
