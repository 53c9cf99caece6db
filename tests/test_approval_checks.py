"""The approval checks (docs/design.md, Approvals) decide from what they are handed:
the request row, where its run stands as plain values, the policy in force. No run
row and no database: these tests have neither."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.auth.models import AnonymousUser, User
from django.utils import timezone

from approvals.checks import DecisionForbidden, DecisionRefused, RunStanding, check_decision, check_grant_counts, check_reason, staleness
from approvals.models import ApprovalRequest, PolicyVersion
from approvals.policies import default_policy_document

REVISION = "a" * 40
WAITING = RunStanding(started_by_id=1, revision=REVISION, waiting=True, stopping=False, outcome="running")


def pending(**fields: object) -> ApprovalRequest:
    values: dict[str, object] = {
        "tool": "publish",
        "revision": REVISION,
        "policy_version": 1,
        "status": ApprovalRequest.Status.PENDING,
        "expires_at": timezone.now() + timedelta(minutes=5),
        **fields,
    }
    return ApprovalRequest(**values)


def policy(version: int = 1) -> PolicyVersion:
    return PolicyVersion(version=version, document={**default_policy_document(), "version": version})


def reviewer(pk: int) -> User:
    return User(pk=pk, username=f"reviewer{pk}", is_active=True, is_superuser=True)


def test_it_finds_a_request_current_while_its_run_waits_at_its_revision_under_its_policy() -> None:
    assert staleness(pending(), WAITING, 1) is None


@pytest.mark.parametrize(
    ("run", "version", "why"),
    [
        (WAITING, 2, "the policy is now v2, the request was for v1"),
        (RunStanding(1, "b" * 40, True, False, "running"), 1, f"the workspace is at {'b' * 12}, the request was for {'a' * 12}"),
        (RunStanding(1, REVISION, True, True, "running"), 1, "the run is being stopped, no longer waiting for this approval"),
        (RunStanding(1, REVISION, False, False, "denied"), 1, "the run is denied, no longer waiting for this approval"),
    ],
    ids=["policy", "revision", "stopping", "stopped"],
)
def test_it_says_why_a_request_is_stale_from_the_standing_it_is_handed(run: RunStanding, version: int, why: str) -> None:
    assert staleness(pending(), run, version) == why


def test_it_refuses_a_decision_by_who_may_not_decide() -> None:
    with pytest.raises(DecisionForbidden, match="not a reviewer of this run.s project"):
        check_decision(pending(), AnonymousUser(), WAITING, policy())
    with pytest.raises(DecisionForbidden, match="separation of duties"):
        check_decision(pending(), reviewer(1), WAITING, policy())
    check_decision(pending(), reviewer(2), WAITING, policy())


def test_it_names_the_lapse_a_refused_decision_records() -> None:
    with pytest.raises(DecisionRefused) as expired:
        check_decision(pending(expires_at=timezone.now() - timedelta(seconds=1)), reviewer(2), WAITING, policy())
    assert expired.value.lapse == ("expired", "expired before a decision")
    with pytest.raises(DecisionRefused) as stale:
        check_decision(pending(), reviewer(2), WAITING, policy(2))
    assert stale.value.lapse == ("stale", "the policy is now v2, the request was for v1")
    with pytest.raises(DecisionRefused, match="already granted") as decided:
        check_decision(pending(status=ApprovalRequest.Status.GRANTED), reviewer(2), WAITING, policy())
    assert decided.value.lapse is None


def test_it_wants_a_reason_for_a_denial() -> None:
    assert check_reason("  out of scope ") == "out of scope"
    with pytest.raises(DecisionRefused, match="a denial needs a reason"):
        check_reason("   ")


def test_it_never_counts_the_starter_toward_a_quorum_even_where_self_approval_is_on() -> None:
    # check_decider lets a self-approving starter through; a quorum still needs others.
    with pytest.raises(DecisionForbidden, match="cannot count toward the 2 needed"):
        check_grant_counts(pending(needed=2), reviewer(1), WAITING)
