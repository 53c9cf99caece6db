"""The checks of an approval request: who may decide it, whether it can be decided now,
and whether it still describes what would run. They read the request row and what the
caller hands them (where its run stands, as plain values; the policy in force) and write
nothing: recording a lapse, deciding and waking the run are the orchestration's
(runs.approval_flow.flow), above. A request's status changes are the core's table
(core.lifecycle: check_request_transition, check_lapse)."""

from __future__ import annotations

from dataclasses import dataclass

from django.contrib.auth.models import AnonymousUser, User
from django.utils import timezone

from approvals.models import ApprovalRequest, PolicyVersion
from approvals.policies import load_policy, self_approval_on
from common import permissions
from common.redact import MASK
from core.patchtext import preview_problem
from projects.access import permissions_in

Status = ApprovalRequest.Status


@dataclass(frozen=True)
class RunStanding:
    """Where a request's run is now, as the checks read it."""

    started_by_id: int | None  # who started the run: they may not decide its requests
    revision: str  # the workspace revision of the run's state
    waiting: bool  # waiting for an approval
    stopping: bool  # a kill was requested
    outcome: str
    # Whose run: only its project's reviewers (or a site admin) may decide (projects.access).
    project_id: int | None = None


class DecisionRefused(Exception):
    """The request cannot be decided now (already decided, expired, stale). ``lapse``
    is the (status, reason) a decision attempt records for an expired or stale one."""

    def __init__(self, message: str, lapse: tuple[str, str] | None = None) -> None:
        super().__init__(message)
        self.lapse = lapse


class DecisionForbidden(DecisionRefused):
    """This user may not decide this request (no reviewer permission, or it is their own run)."""


def staleness(request: ApprovalRequest, run: RunStanding, policy_version: int) -> str | None:
    """Why a request no longer describes what would run, or None if it still does.
    Gates decide under the policy now in force (v``policy_version``), so a newer policy
    makes it stale."""
    if policy_version != request.policy_version:
        return f"the policy is now v{policy_version}, the request was for v{request.policy_version}"
    if run.revision != request.revision:
        return f"the workspace is at {run.revision[:12]}, the request was for {request.revision[:12]}"
    if not run.waiting or run.stopping:
        state = "being stopped" if run.stopping else run.outcome
        return f"the run is {state}, no longer waiting for this approval"
    return None


def check_decider(user: User | AnonymousUser, run: RunStanding, policy: PolicyVersion) -> None:
    """Who may decide: a reviewer of the run's project, and not the one who started the
    run unless self-approval is on (separation of duties)."""
    if not user.is_authenticated or permissions.DECIDE_APPROVALS not in permissions_in(user, run.project_id):
        raise DecisionForbidden("you are not a reviewer of this run's project")
    if run.started_by_id == user.pk and not self_approval_on(load_policy(policy)):
        raise DecisionForbidden("you started this run; another reviewer must decide (separation of duties)")


def check_named(request: ApprovalRequest, user: User | AnonymousUser) -> None:
    """A rule that names who decides narrows the project's reviewers to those people."""
    users, groups = list(request.eligible_users), list(request.eligible_groups)
    if not users and not groups:
        return
    if user.get_username() in users or (isinstance(user, User) and user.groups.filter(name__in=groups).exists()):
        return
    named = ", ".join([*users, *(f"group {g}" for g in groups)])
    raise DecisionForbidden(f"this request is decided by {named}")


def check_grant_counts(request: ApprovalRequest, user: User | AnonymousUser, run: RunStanding) -> None:
    """A grant toward a quorum is a distinct person's, never the run's starter's."""
    if request.needed > 1 and run.started_by_id == user.pk:
        raise DecisionForbidden(f"you started this run: your grant cannot count toward the {request.needed} needed")
    if isinstance(user, User) and request.grants.filter(user=user).exists():
        raise DecisionRefused("you granted this request already; another reviewer must grant too")


def check_decision(
    request: ApprovalRequest, user: User | AnonymousUser, run: RunStanding, policy: PolicyVersion, *, granting: bool = False
) -> None:
    """Whether ``user`` may decide (``granting``: grant) ``request`` now, ``policy``
    being the version in force; DecisionRefused says why not."""
    check_decider(user, run, policy)
    check_named(request, user)
    if request.status != Status.PENDING:
        raise DecisionRefused(f"this request is already {request.status}")
    if request.expires_at <= timezone.now():
        raise DecisionRefused("this request has expired", lapse=(Status.EXPIRED, "expired before a decision"))
    stale = staleness(request, run, policy.version)
    if stale is not None:
        raise DecisionRefused(f"this request is stale: {stale}", lapse=(Status.STALE, stale))
    if granting:
        check_grant_counts(request, user, run)
    # A grant approves what the reviewer saw; a diff that is not the whole, exact
    # patch (masking changed its lines, or it leaves changes out) cannot be granted.
    # It can still be denied, so the run hears why.
    problem = preview_problem(request.diff, MASK) if granting else None
    if problem is not None:
        raise DecisionRefused(f"this request cannot be granted as it is: {problem}, so the diff shown is not exactly what would ship")


def check_reason(reason: str, missing: str = "a denial needs a reason") -> str:
    """A denial's reason (or a request for changes' message), stripped; one is needed."""
    reason = reason.strip()
    if not reason:
        raise DecisionRefused(missing)
    return reason
