"""Approvals (docs/design.md, Approvals): bound to the exact call and revision, single use,
stale and expired ones refused, separation of duties, every decision audited."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from django.contrib.auth.models import User
from django.db import close_old_connections, connection
from django.test import Client
from django.utils import timezone

from approvals.checks import DecisionRefused
from approvals.models import ApprovalRequest
from core.state import RunState
from runs.approval_flow.flow import deny, do_consume, expire_due, grant
from runs.approval_flow.gate import DjangoApprovals
from runs.models import Event, Run
from runs.services import drive_run
from tests.helpers import World

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.postgres]


@pytest.fixture
def resumes(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    woken: list[str] = []
    monkeypatch.setattr("runs.scheduling.queue.enqueue_resume", woken.append)
    return woken


def drive(world: World, run: Run) -> RunState:
    run.refresh_from_db()
    return drive_run(run, world.environment(), DjangoApprovals(run))


def waiting_run(operator: User) -> tuple[World, Run, ApprovalRequest]:
    world = World()
    run = world.create(actor=operator)
    state = drive(world, run)
    assert state.status == "waiting_approval"
    return world, run, ApprovalRequest.objects.get(run=run)


def test_it_files_a_request_with_the_exact_call_revision_policy_and_evidence(operator: User) -> None:
    world, run, request = waiting_run(operator)
    run.refresh_from_db()
    assert request.tool == "publish" and request.args == {"message": "reject negative quantities"}
    assert request.revision == run.revision and request.policy_version == run.policy.version
    assert request.evidence[0]["check_id"] == "tests" and request.evidence[0]["passed"]
    assert request.requested_by == operator
    assert request.rule == "publishing needs a reviewer and a passing check"
    assert request.expires_at > timezone.now() + timedelta(minutes=59)


def test_it_lets_a_reviewer_grant_and_the_run_uses_the_approval_once(operator: User, reviewer: User, resumes: list[str]) -> None:
    world, run, request = waiting_run(operator)
    grant(request, reviewer)
    assert resumes == [str(run.pk)]
    state = drive(world, run)
    assert state.outcome == "complete"
    request.refresh_from_db()
    assert request.status == "consumed" and request.consumed_by_call == "c4"
    assert len(world.executor.outbox) == 1
    types = list(Event.objects.filter(run=run).values_list("type", flat=True))
    assert types.count("approval_decided") == 1 and types.count("approval_consumed") == 1


def test_it_stops_the_run_denied_with_the_reason(operator: User, reviewer: User, resumes: list[str]) -> None:
    world, run, request = waiting_run(operator)
    with pytest.raises(DecisionRefused, match="needs a reason"):
        deny(request, reviewer, "   ")
    deny(request, reviewer, "release freeze")
    state = drive(world, run)
    assert state.outcome == "denied" and "release freeze" in state.stop_message
    assert world.executor.outbox == {}
    assert ApprovalRequest.objects.filter(run=run).count() == 1  # not presented again


def test_it_refuses_decisions_from_non_reviewers_and_from_the_run_starter(operator: User, outsider: User, reviewer: User) -> None:
    _, run, request = waiting_run(reviewer)
    with pytest.raises(DecisionRefused, match="not a reviewer of this run.s project"):
        grant(request, operator)
    with pytest.raises(DecisionRefused, match="not a reviewer of this run.s project"):
        grant(request, outsider)
    with pytest.raises(DecisionRefused, match="separation of duties"):
        grant(request, reviewer)
    request.refresh_from_db()
    assert request.status == "pending"


def test_it_refuses_to_grant_an_expired_request_and_audits_the_expiry(
    operator: User, reviewer: User, resumes: list[str], client: Client
) -> None:
    _, run, request = waiting_run(operator)
    ApprovalRequest.objects.filter(pk=request.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    request.refresh_from_db()
    # Reading the page says why it cannot be granted, and records nothing.
    client.force_login(reviewer)
    page = client.get(f"/approvals/{request.pk}/")
    assert b"this request has expired" in page.content
    assert ApprovalRequest.objects.get(pk=request.pk).status == "pending"
    assert not Event.objects.filter(run=run, type="approval_lapsed").exists()
    with pytest.raises(DecisionRefused, match="expired"):
        grant(request, reviewer)
    request.refresh_from_db()
    assert request.status == "expired"
    assert Event.objects.filter(run=run, type="approval_lapsed", payload__status="expired").count() == 1


def test_it_expires_due_requests_and_the_run_stops_approval_expired(operator: User, resumes: list[str]) -> None:
    world, run, request = waiting_run(operator)
    ApprovalRequest.objects.filter(pk=request.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    assert expire_due() == 1
    assert resumes == [str(run.pk)]
    state = drive(world, run)
    assert state.outcome == "approval_expired"
    assert not ApprovalRequest.objects.filter(run=run, status="pending").exists()
    ended = Event.objects.get(run=run, type="wait_ended")
    assert ended.payload["exit"] == "expired" and ended.payload["run"] == "stopped"


def test_it_refuses_a_stale_request_whose_revision_changed(operator: User, reviewer: User) -> None:
    _, run, request = waiting_run(operator)
    state = dict(run.state)
    state["revision"] = "0" * 40
    Run.objects.filter(pk=run.pk).update(state=state)
    with pytest.raises(DecisionRefused, match="stale"):
        grant(request, reviewer)
    request.refresh_from_db()
    assert request.status == "stale"
    assert Event.objects.filter(run=run, type="approval_lapsed", payload__status="stale").exists()


def test_it_never_consumes_a_grant_for_another_revision(operator: User, reviewer: User, resumes: list[str]) -> None:
    world, run, request = waiting_run(operator)
    grant(request, reviewer)
    # The workspace changes before the run resumes: the key no longer matches.
    world.workspace.files["src/calc.py"] += "# changed behind the reviewer's back\n"
    state = drive(world, run)
    assert state.outcome != "complete"
    request.refresh_from_db()
    assert request.status == "stale"  # never used, and never usable again
    assert world.executor.outbox == {}
    # The evidence was for the old revision, so publish is refused before approval.
    assert Event.objects.filter(run=run, type="evidence_cleared").exists()
    assert Event.objects.filter(run=run, type="check_required", payload__for_tool="publish").exists()


def test_it_gives_exactly_one_success_to_fifty_concurrent_consumers(operator: User, reviewer: User, resumes: list[str]) -> None:
    _, run, request = waiting_run(operator)
    grant(request, reviewer)
    barrier = threading.Barrier(50)
    wins: list[bool] = []
    lock = threading.Lock()

    def consume(n: int) -> None:
        close_old_connections()
        try:
            barrier.wait()
            won = do_consume(request.pk, f"c-{n}")
            with lock:
                wins.append(won)
        finally:
            connection.close()

    threads = [threading.Thread(target=consume, args=(n,)) for n in range(50)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(wins) == 50
    assert wins.count(True) == 1
    request.refresh_from_db()
    assert request.status == "consumed"


def test_it_refuses_a_second_decision_on_the_same_request(operator: User, reviewer: User, admin_user: User, resumes: list[str]) -> None:
    _, _, request = waiting_run(operator)
    grant(request, reviewer)
    request.refresh_from_db()
    with pytest.raises(DecisionRefused, match="already granted"):
        deny(request, admin_user, "too late")
