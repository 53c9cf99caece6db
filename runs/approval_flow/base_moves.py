"""A push's base branch, compared with the run's base commit where a reviewer decides:
the approval page says how far the branch moved and whether the change still
applies (sandbox.vcs.base_check), and under a policy whose ``publish_checks.moved_base``
is ``stale`` a grant of a request whose base moved is refused as stale, like one
made stale by a policy save. The worker asks the same again just before the push
(sandbox.tools.effects)."""

from __future__ import annotations

from dataclasses import replace

from django.conf import settings

from approvals.models import ApprovalRequest
from approvals.policies import current_policy_row, load_policy
from core.effects import PushEffect, parse_effect
from sandbox.public import HEX_REF, BaseMove, RemoteAccess, RemoteError, check_base

PAGE_TIMEOUT_SECONDS = 10.0


def base_branch(contract: dict[str, object]) -> str | None:
    """The branch a run cloned (None: the remote's default branch); "" for a run
    cloned at a commit id, whose base cannot move."""
    workspace = contract.get("workspace")
    ref = workspace.get("ref") if isinstance(workspace, dict) else None
    if not isinstance(ref, str):
        return None
    return "" if HEX_REF.match(ref) else ref


def base_move(request: ApprovalRequest) -> BaseMove | None:
    """How the base branch of a push's request moved, None if it did not (or the
    request is no push). RemoteError when the remote cannot be asked."""
    if not isinstance(request.effect, dict) or request.effect.get("kind") != "push":
        return None
    effect = parse_effect(request.effect)
    assert isinstance(effect, PushEffect)  # by its kind
    branch = base_branch(request.run.contract)
    if branch == "":
        return None
    # A reviewer's page waits for this: a remote that does not answer costs it seconds,
    # not the minutes a clone may take (the push asks again with the full timeout).
    access = RemoteAccess.from_settings(settings)
    access = replace(access, timeout_seconds=min(access.timeout_seconds, PAGE_TIMEOUT_SECONDS))
    return check_base(effect.remote, effect.base, branch, request.diff or "", access)


def base_move_now(request: ApprovalRequest) -> str | None:
    """What the approval page says of the base branch, None when it did not move."""
    try:
        moved = base_move(request)
    except RemoteError as exc:
        return f"could not compare with the remote's base branch: {exc.message}"
    return moved.words() if moved is not None else None


def moved_base_staleness(request: ApprovalRequest) -> str | None:
    """Why a grant of ``request`` is stale under its project's policy because the base
    branch moved; None when the policy only shows a move, or there is none. A remote
    that cannot be asked makes no request stale (the push's own check asks again)."""
    policy = load_policy(current_policy_row(request.run.project_id))
    if policy.publish_checks.moved_base != "stale":
        return None
    try:
        moved = base_move(request)
    except RemoteError:
        return None
    return f"{moved.words()}, and the policy makes a grant on a moved base stale" if moved is not None else None
