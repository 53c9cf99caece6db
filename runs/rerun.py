"""Going again: an operator re-runs an ended run as a new run with the same contract
and proposer, in the same project, under the same policy version, linked to the old
one (``Run.rerun_of``). The old run and its log stay as they were."""

from __future__ import annotations

from django.contrib.auth.models import AnonymousUser, User
from django.db import transaction

from approvals.policies import current_policy_row
from runs.control import ACTIVE, ControlRefused, check_operator
from runs.models import Run
from runs.runtime import create_run


def check_rerun(run: Run, user: User | AnonymousUser) -> None:
    """Refuse, naming why, a re-run this user may not start or that would not be the
    same run: one still going, or one whose project has since changed its policy."""
    check_operator(user, run)
    if run.status in ACTIVE:
        raise ControlRefused(f"{run.task_id} is still {run.get_status_display().lower()}: a run is re-run once it has ended")
    current = current_policy_row(run.project_id)
    if current.pk != run.policy_id:
        raise ControlRefused(
            f"project {run.project.slug}'s policy is now v{current.version}, not v{run.policy.version} this run had:"
            " a re-run would not be the same run; start a new one instead"
        )


def rerun(run: Run, user: User | AnonymousUser) -> Run:
    check_rerun(run, user)
    # One transaction: the new run is never seen without its link, and its start is
    # queued only once both are committed (create_run's on_commit).
    with transaction.atomic():
        new = create_run(run.contract, run.proposer, user, project=run.project.slug)
        Run.objects.filter(pk=new.pk).update(rerun_of=run)
    new.refresh_from_db()
    return new
