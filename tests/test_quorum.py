"""Quorum approvals (projects): a rule that asks can need N distinct reviewers, or name
who decides. Each grant is bound, as every grant, to the exact call, revision and
policy version; the call runs once the quorum is reached, and only once; one denial
stops it; the run's starter never counts, and nobody grants twice."""

from __future__ import annotations

import re
import threading

import pytest
from django.contrib.auth.models import Group, User
from django.db import connection
from django.test import Client
from django.urls import reverse

from approvals.checks import DecisionForbidden, DecisionRefused
from approvals.models import ApprovalGrant, ApprovalRequest
from core.simulated import SimExecutor
from runs.approval_flow.flow import deny, grant
from runs.approval_flow.gate import DjangoApprovals
from runs.models import Event, Run
from runs.services import drive_run
from tests.helpers import KillFlag, World, edited_policy, new_policy_version

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.postgres]


def reviewers(*names: str) -> list[User]:
    group = Group.objects.get(name="reviewer")
    made = []
    for name in names:
        user = User.objects.create_user(username=name, password=f"{name}-pass-123")
        user.groups.add(group)
        made.append(user)
    return made


def publish_needs(**who: object) -> None:
    """A new policy version whose publish rule asks ``who`` (core.policy.Reviewers)."""
    document = edited_policy()
    rules = document["rules"]
    assert isinstance(rules, list)
    new_policy_version(rules=[{**rule, "reviewers": who} if rule["tool"] == "publish" else rule for rule in rules])


def waiting(world: World, starter: User) -> tuple[Run, ApprovalRequest]:
    run = world.create(actor=starter)
    state = drive_run(run, world.environment(), DjangoApprovals(run), controls=KillFlag(str(run.pk)))
    assert state.status == "waiting_approval"
    return run, ApprovalRequest.objects.get(run=run)


def drive(world: World, run: Run) -> str:
    run.refresh_from_db()
    return drive_run(run, world.environment(), DjangoApprovals(run), controls=KillFlag(str(run.pk))).outcome


def publishes(world: World) -> int:
    executor = world.executor
    assert isinstance(executor, SimExecutor)
    return sum(1 for call in executor.calls if call.tool == "publish")


def test_it_grants_once_when_two_of_three_grant_at_once_and_performs_the_effect_once() -> None:
    publish_needs(count=2)
    starter, *deciders = reviewers("sam-starter", "ria", "rob", "ray")
    world = World()
    run, request = waiting(world, starter)
    assert request.needed == 2
    barrier = threading.Barrier(len(deciders))
    outcomes: dict[str, str] = {}

    def decide(user: User) -> None:
        try:
            barrier.wait()
            grant(ApprovalRequest.objects.get(pk=request.pk), user)
            outcomes[user.username] = "granted"
        except DecisionRefused as exc:
            outcomes[user.username] = str(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=decide, args=(user,)) for user in deciders]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert sorted(outcomes.values()).count("granted") == 2, outcomes
    late = next(text for text in outcomes.values() if text != "granted")
    assert "already granted" in late or "decided by someone else" in late, late
    request.refresh_from_db()
    assert request.status == "granted" and ApprovalGrant.objects.filter(request=request).count() == 2
    decided = [e.payload for e in Event.objects.filter(run=run, type="approval_decided").order_by("seq")]
    assert [(p["grants"], p["needed"]) for p in decided] == [(1, 2), (2, 2)]
    assert drive(world, run) == "complete"
    assert drive(world, run) == "complete" and publishes(world) == 1
    request.refresh_from_db()
    assert request.status == "consumed"


def test_it_never_counts_the_starter_and_never_counts_one_person_twice() -> None:
    publish_needs(count=2)
    starter, ria, rob = reviewers("sam-starter", "ria", "rob")
    world = World()
    run, request = waiting(world, starter)
    with pytest.raises(DecisionForbidden, match="you started this run"):
        grant(request, starter)
    grant(request, ria)
    with pytest.raises(DecisionRefused, match="you granted this request already"):
        grant(ApprovalRequest.objects.get(pk=request.pk), ria)
    request.refresh_from_db()
    assert request.status == "pending"
    assert drive(world, run) == "waiting_approval" and publishes(world) == 0
    grant(request, rob)
    assert drive(world, run) == "complete" and publishes(world) == 1


def test_it_stops_at_one_denial_whatever_was_granted_before() -> None:
    publish_needs(count=3)
    starter, ria, rob = reviewers("sam-starter", "ria", "rob")
    world = World()
    run, request = waiting(world, starter)
    grant(request, ria)
    deny(ApprovalRequest.objects.get(pk=request.pk), rob, "not this change")
    request.refresh_from_db()
    assert request.status == "denied"
    assert drive(world, run) == "denied" and publishes(world) == 0


def test_it_lets_only_the_named_people_decide() -> None:
    publish_needs(count=1, groups=["security"], users=["una"])
    starter, ria, una, sec = reviewers("sam-starter", "ria", "una", "sec")
    sec.groups.add(Group.objects.create(name="security"))
    world = World()
    run, request = waiting(world, starter)
    with pytest.raises(DecisionForbidden, match="this request is decided by una, group security"):
        grant(request, ria)
    with pytest.raises(DecisionForbidden, match="decided by una, group security"):
        deny(request, ria, "no")
    grant(request, sec)
    assert drive(world, run) == "complete"
    second_run, second = waiting(World(), starter)
    grant(second, una)
    second.refresh_from_db()
    assert second.status == "granted"


def test_it_shows_the_reviewer_who_granted_and_how_many_are_still_needed() -> None:
    publish_needs(count=2)
    starter, ria = reviewers("sam-starter", "ria")
    _, request = waiting(World(), starter)
    client = Client()
    client.force_login(ria)
    answer = client.post(reverse("approvals:grant", args=[request.pk]), follow=True)
    page = answer.content.decode()
    assert answer.redirect_chain[-1][0] == reverse("approvals:detail", args=[request.pk])
    assert "Your grant counts: 1 of 2 needed" in page
    assert re.search(r'id="quorum"><strong>1 of 2</strong> grants from different reviewers: ria;', page)
