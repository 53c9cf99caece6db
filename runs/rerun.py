"""Going again: an operator re-runs an ended run as a new run with the same contract
and proposer, in the same project, linked to the old one (``Run.rerun_of``), under the
project's policy as it is now (which the offer and the confirmation name); the old run
and its log stay as they were. And a reviewer or
operator asks again for an out-of-date request while its run still waits on it: the
run is woken and its call goes back through the gates, filing a new request for
where the run and its policy are now (core.waits)."""

from __future__ import annotations

from django.contrib.auth.models import AnonymousUser, User
from django.db import transaction

from approvals.models import ApprovalRequest
from approvals.policies import current_policy_row
from common.permissions import DECIDE_APPROVALS, OPERATE_RUNS
from projects.access import permissions_in
from runs.approval_flow.flow import DECIDING, do_lapse, staleness_now, wake_after_commit
from runs.control import ACTIVE, ControlRefused, check_operator
from runs.models import Run
from runs.outcome import label_of
from runs.persistence.store import load_state
from runs.runtime import create_run

Status = ApprovalRequest.Status


def check_rerun(run: Run, user: User | AnonymousUser) -> None:
    """Refuse, naming why, a re-run this user may not start: one still going."""
    check_operator(user, run)
    if run.status in ACTIVE:
        raise ControlRefused(f"{run.task_id} is still {run.get_status_display().lower()}: a run is re-run once it has ended")


def rerun_policy(run: Run) -> str:
    """The policy a re-run of ``run`` would run under, in words: its project's current
    one, as any new run there. A re-run is for going again as things are now (the
    project's admins changed the policy for a reason), so a changed policy is said, not
    refused."""
    current = current_policy_row(run.project_id)
    if current.pk == run.policy_id:
        return f"policy v{current.version}, as before"
    return f"policy v{current.version}, the project's current (this run had v{run.policy.version})"


def rerun(run: Run, user: User | AnonymousUser) -> Run:
    check_rerun(run, user)
    # One transaction: the new run is never seen without its link, and its start is
    # queued only once both are committed (create_run's on_commit).
    with transaction.atomic():
        new = create_run(run.contract, run.proposer, user, project=run.project.slug)
        Run.objects.filter(pk=new.pk).update(rerun_of=run)
    new.refresh_from_db()
    return new


def check_ask_again(request: ApprovalRequest, user: User | AnonymousUser) -> str:
    """Refuse, naming why, asking again for ``request``; else say why it is out of
    date. Only an out-of-date request whose run still waits on its call qualifies: an
    expired one has stopped its run (or will, at its next step), and a current one is
    decided, not asked again."""
    if not user.is_authenticated or not {DECIDE_APPROVALS, OPERATE_RUNS} & permissions_in(user, request.run.project_id):
        raise ControlRefused("only a reviewer or an operator of this run's project may ask again")
    if request.has_expired():
        # The lead's choice (core.lifecycle.WAIT_EXITS): an expiry ends the wait with
        # a stop, so no new request for this call could ever be used.
        raise ControlRefused("an expired request stops its run: the run cannot use a new one; an operator can re-run it")
    if request.status == Status.PENDING:
        why = staleness_now(request)
        if why is None:
            raise ControlRefused("this request is still current: grant, deny or request changes instead")
    elif request.status == Status.STALE:
        why = request.reason
    else:
        raise ControlRefused(f"this request is {request.get_status_display().lower().replace('_', ' ')}: there is nothing to ask again")
    run = Run.objects.get(pk=request.run_id)
    waiting = load_state(run).waiting if run.status in ACTIVE else None
    if waiting is None or waiting.call_id != request.call_id:
        raise ControlRefused(f"the run no longer waits on this call (it is {label_of(run)}): it cannot use a new request")
    if ApprovalRequest.objects.filter(run_id=run.pk, call_id=request.call_id, created_at__gt=request.created_at).exists():
        raise ControlRefused("the run has already asked again: see the newer request")
    return why


def ask_again(request: ApprovalRequest, user: User | AnonymousUser) -> None:
    why = check_ask_again(request, user)
    # The lapse (if not yet recorded) and the wake-up commit together: the run leaves
    # the wait and regates at once, filing the new request.
    with transaction.atomic():
        do_lapse(request, Status.STALE, why, fence=DECIDING)
        wake_after_commit(str(request.run_id))
