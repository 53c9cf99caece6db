"""Approval requests in their runs' lives: a reviewer's grant or denial, the lapses
(expiry, a policy save that makes requests stale, a stopped run's cancellations) and
the reviewers' queue. Each change of a request lands with its event in the run's log,
behind its fence, and wakes the run once it commits. approvals own the rows and the
checks (approvals.checks), which take where the run stands as plain values; this is
the orchestration over both, so it lives with runs, above approvals (docs/design.md,
Approvals): the dependency is an import pointing down, with no port or signal back up."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

from django.contrib.auth.models import AnonymousUser, User
from django.db import IntegrityError, transaction
from django.db.models import F, Max, OuterRef, QuerySet, Subquery, Value
from django.db.models.functions import Coalesce
from django.utils import timezone

from approvals.checks import DecisionRefused, RunStanding, check_decision, check_reason, staleness
from approvals.models import ApprovalGrant, ApprovalRequest, PolicyVersion
from approvals.policies import current_policy_row, default_policy_document
from core import events as ev
from core.fences import Fence, RowLock
from core.jsonutil import JSON
from core.lifecycle import OPEN_STATUSES, check_lapse, check_request_transition, sources_of
from ledger.writer import batch as ledger_batch
from ledger.writer import keep, token_of
from projects import audit
from projects.models import default_project_id
from runs.approval_flow.base_moves import moved_base_staleness
from runs.approval_flow.shown import Review, review_of
from runs.models import Run
from runs.persistence.eventlog import append_event
from runs.scheduling import queue

Status = ApprovalRequest.Status
# What a person's decision makes of a pending request (and says in approval_decided).
Decided = Literal["granted", "denied", "changes_requested"]


# A reviewer's decision and the beat's expiry do not drive the run: the conditional
# UPDATE of the request decides whether they write, the run row's lock orders the event.
DECIDING = RowLock("a reviewer's decision")
EXPIRING = RowLock("the beat's expiry of requests")
SAVING = RowLock("an admin's policy save")


def standing(run_id: str) -> RunStanding:
    """The run as the database has it now (not a row loaded earlier)."""
    run = Run.objects.get(pk=run_id)
    return RunStanding(
        started_by_id=run.created_by_id,
        revision=str((run.state or {}).get("revision", "")),
        waiting=run.status == Run.Status.WAITING,
        stopping=run.kill_requested,
        outcome=run.outcome,
        project_id=run.project_id,
    )


def staleness_now(request: ApprovalRequest) -> str | None:
    """``approvals.checks.staleness`` against where the run and its project's policy are now."""
    run = standing(str(request.run_id))
    return staleness(request, run, current_policy_row(run.project_id).version)


def check_decision_now(request: ApprovalRequest, user: User | AnonymousUser, *, granting: bool = False) -> None:
    """``approvals.checks.check_decision`` against where the run and its project's policy
    are now; a grant also against where the push's base branch is now (runs.approval_flow.base_moves)."""
    run = standing(str(request.run_id))
    check_decision(request, user, run, current_policy_row(run.project_id), granting=granting)
    if granting and (moved := moved_base_staleness(request)) is not None:
        raise DecisionRefused(f"this request is stale: {moved}", lapse=(Status.STALE, moved))


def check_decision_recording_lapse(request: ApprovalRequest, user: User | AnonymousUser, *, granting: bool = False) -> None:
    """``check_decision_now`` for a decision being made: a refusal because the request
    expired or went stale is recorded (and audited) before it is raised."""
    try:
        check_decision_now(request, user, granting=granting)
    except DecisionRefused as exc:
        # The run's wait has ended with the lapse: wake it, so it leaves the wait now.
        if exc.lapse is not None and do_lapse(request, *exc.lapse, fence=DECIDING):
            wake_after_commit(str(request.run_id))
        raise


def _decide(
    request: ApprovalRequest,
    user: User | AnonymousUser,
    status: Decided,
    reason: str,
    grants: int,
    comments: Sequence[dict[str, JSON]] = (),
    shown: str | None = None,
) -> None:
    # Only a still-pending row can be decided: a concurrent decision, expiry or
    # cancellation wins or loses as a whole, never half.
    check_request_transition(Status.PENDING, status)
    with transaction.atomic():
        updated = ApprovalRequest.objects.filter(pk=request.pk, status=Status.PENDING).update(
            status=status, decided_by=user, decided_at=timezone.now(), reason=reason, comments=list(comments)
        )
        if updated != 1:
            raise DecisionRefused("this request was decided by someone else a moment ago")
        _record_decision(request, user, status, reason, grants, shown)
        wake_after_commit(str(request.run_id))


def reviewed(request: ApprovalRequest, shown: str | None) -> Review:
    """What the approval page shows of ``request`` now (runs.approval_flow.shown), kept
    for the decision's ledger entry; refused when the page the decider saw (the digest
    it posted, ``shown``) showed something else."""
    review = review_of(request)
    if shown and shown != review.digest:
        raise DecisionRefused("what this request shows has changed since your page was loaded: reload it and decide on what it shows now")
    keep(review.shown)
    return review


def _record_decision(
    request: ApprovalRequest, user: User | AnonymousUser, decision: Decided, reason: str, grants: int, shown: str | None
) -> None:
    # The digest of what the decider was shown goes into the event and, with it, into
    # the decision's ledger entry (runs.persistence.decisions).
    review = reviewed(request, shown)
    append_event(
        str(request.run_id),
        ev.ApprovalDecided,
        fence=DECIDING,
        call_id=request.call_id,
        request_id=str(request.pk),
        decision=decision,
        by=user.get_username(),
        reason=reason,
        self_approved=request.run.created_by_id == user.pk,
        grants=grants,
        needed=request.needed,
        shown=review.digest,
        via=token_of(user),
    )


def grant(request: ApprovalRequest, user: User | AnonymousUser, comment: str = "", shown: str | None = None) -> None:
    """One person's grant; the request is granted (and the run woken) once the rule's
    number of distinct people have granted. ``shown``: the digest of what the page
    showed the decider (runs.approval_flow.shown), when a page posted it."""
    check_decision_recording_lapse(request, user, granting=True)
    assert isinstance(user, User)  # the check admits signed-in reviewers only
    comment = comment.strip()
    with transaction.atomic():
        # The request row's lock orders the grants of one request: each counts the
        # grants before it, so the quorum is reached, and the request granted, once.
        locked = ApprovalRequest.objects.select_for_update().get(pk=request.pk)
        if locked.status != Status.PENDING:
            raise DecisionRefused(f"this request is already {locked.status}")
        try:
            # A savepoint: a second grant by the same person fails alone.
            with transaction.atomic():
                ApprovalGrant.objects.create(request=locked, user=user, comment=comment)
        except IntegrityError:
            raise DecisionRefused("you granted this request already; another reviewer must grant too") from None
        grants = locked.grants.count()
        if grants < locked.needed:
            _record_decision(locked, user, "granted", comment, grants, shown)
            return
        _decide(locked, user, "granted", comment, grants, shown=shown)


def deny(request: ApprovalRequest, user: User | AnonymousUser, reason: str, shown: str | None = None) -> None:
    reason = check_reason(reason)
    check_decision_recording_lapse(request, user)
    _decide(request, user, "denied", reason, grants=request.grants.count(), shown=shown)


def request_changes(
    request: ApprovalRequest, user: User | AnonymousUser, message: str, comments: Sequence[dict[str, JSON]] = (), shown: str | None = None
) -> None:
    """Instead of the call, the reviewer's words to the model (``message``, holding
    the line ``comments`` too, each also kept as {file, line, text}): the call is not
    performed, the run goes on, and the identical call is not asked for again."""
    message = check_reason(message, "a request for changes needs the words the model is to read")
    check_decision_recording_lapse(request, user)
    _decide(request, user, "changes_requested", message, grants=request.grants.count(), comments=comments, shown=shown)


def do_consume(request_id: Any, call_id: str) -> bool:
    """Use a granted approval once. The conditional UPDATE is the lock: of any number
    of concurrent consumers exactly one sees a row count of 1."""
    now = timezone.now()
    updated = ApprovalRequest.objects.filter(pk=request_id, status=Status.GRANTED, expires_at__gt=now).update(
        status=Status.CONSUMED, consumed_at=now, consumed_by_call=call_id
    )
    return updated == 1


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
            append_event(
                str(request.run_id),
                ev.ApprovalLapsed,
                fence=fence,
                call_id=request.call_id,
                request_id=str(request.pk),
                status=status,
                reason=reason,
            )
    return updated == 1


def cancel_open_requests(run_id: str, reason: str, *, fence: Fence) -> list[str]:
    """Every open request of a stopped run leaves the queue, each with an event."""
    cancelled = []
    for request in ApprovalRequest.objects.filter(run_id=run_id, status__in=OPEN_STATUSES):
        if do_lapse(request, Status.CANCELLED, reason, fence=fence):
            cancelled.append(str(request.pk))
    return cancelled


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
    """The run's wait may be over: once this transaction commits, a worker resumes it."""
    # Through the module, so a test that stands in for the broker sees every wake-up.
    transaction.on_commit(lambda: queue.enqueue_resume(run_id))


def pending_requests() -> QuerySet[ApprovalRequest]:
    """What reviewers can still decide: pending, not expired, asked under the policy
    in force in its run's project, and its run waiting for it at the revision it was asked for (a run being
    stopped cancels its requests; this keeps them out meanwhile). A stale request never
    counts as waiting, not even before its lapse is recorded."""
    newest = newest_in_run_project()
    return ApprovalRequest.objects.filter(
        run__status=Run.Status.WAITING,
        run__kill_requested=False,
        run__revision=F("revision"),
        status=Status.PENDING,
        expires_at__gt=timezone.now(),
        policy_version=newest,
    ).order_by("created_at")


# -- policy versions ---------------------------------------------------------------------


def newest_in_run_project() -> Coalesce:
    """For a query over requests: the number of the policy in force in each one's run's
    project; for a project with no version yet, the default document's, which is what
    ``current_policy_row`` will make its first (not yet written, as nothing read it)."""
    newest = PolicyVersion.objects.filter(project_id=OuterRef("run__project_id")).order_by("-version").values("version")[:1]
    return Coalesce(Subquery(newest), Value(default_policy_document()["version"]))


def lapse_stale(request: ApprovalRequest, current: int, *, fence: Fence) -> bool:
    """A pending request asked under a policy older than v``current`` can no longer be
    granted (gates decide under the policy in force): it lapses ``stale``."""
    return do_lapse(request, Status.STALE, f"policy v{current} replaced v{request.policy_version} while the request waited", fence=fence)


def save_policy_version(row: PolicyVersion, document: dict[str, Any]) -> list[str]:
    """Save ``row`` (project, note and author set, ``document`` checked) as the newest
    version of its project (the default project's when it names none). The project's
    runs decide under it from now on, so each pending request of those runs asked
    under another version lapses stale in the same transaction (no page or count read
    after the save shows it waiting) and its run is woken once that commits: the
    waiting call goes back through the gates at once (docs/design.md, Approvals).
    Other projects' runs and requests are not touched: their policies did not change.
    A wake-up lost on the way, or a request filed under the old version by a worker
    that read it just before, is the beat's sweep's
    (runs.invariants.lapse_stale_requests). Returns the ids of the requests it made
    stale."""
    if row.project_id is None:
        row.project_id = default_project_id()
    for _ in range(3):
        try:
            # Two admins saving at once both compute max+1; the version unique in its
            # project lets one win and the other retry with the next number. The lapses
            # are in the same transaction, so a lost race undoes them too. Their ledger
            # entries are written at its end, after every run's row is locked (ledger.writer).
            with ledger_batch():
                latest = PolicyVersion.objects.filter(project_id=row.project_id).aggregate(v=Max("version"))["v"] or 0
                row.version = latest + 1
                row.document = {**document, "version": row.version}
                row.save()
                stale = []
                waiting = ApprovalRequest.objects.filter(status=Status.PENDING, run__project_id=row.project_id)
                for request in waiting.exclude(policy_version=row.version):
                    if lapse_stale(request, row.version, fence=SAVING):
                        stale.append(str(request.pk))
                        wake_after_commit(str(request.run_id))
                # Who changed the project's policy, and when (projects.audit).
                audit.record(row.project, row.created_by, "policy_saved", version=row.version, note=row.note, stale_requests=len(stale))
            return stale
        except IntegrityError:
            row.pk = None
    raise IntegrityError("could not allocate a policy version number")
