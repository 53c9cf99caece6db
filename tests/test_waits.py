"""Every way out of a wait for a human is defined (docs/design.md, Outcomes, Approvals, Lifecycle):
grant continues, deny stops, expiry stops ``approval_expired``, staleness sends the
call back through the gates, a stop cancels the run's requests; waiting time is not
working time; the sweep repairs rows that break the invariants. Issue 11's cases 2 to
5 are here, against the real worker and Docker sandbox where they involve them."""

from __future__ import annotations

import time
from datetime import timedelta
from pathlib import Path

import pytest
from django.conf import settings
from django.contrib.auth.models import User
from django.test import Client
from django.utils import timezone

from approvals.checks import DecisionRefused
from approvals.models import ApprovalRequest
from core.lifecycle import WAIT_EXITS, IllegalTransition, check_request_transition
from core.ports import Clock
from core.scenarios import call
from core.simulated import FakeClock
from core.state import RunState
from pages.summary import run_summary
from runs import invariants
from runs.approval_flow.flow import deny, grant, pending_requests
from runs.approval_flow.gate import DjangoApprovals
from runs.control import do_kill, kill, set_global
from runs.models import Event, Run
from runs.runtime import create_run, workspace_for
from runs.services import drive_run
from tests.fixtures_services import Worker
from tests.helpers import SCRIPT, KillFlag, World, new_policy_version
from tests.runs_waiting import DEMO_CONTRACT, DEMO_SCRIPT, assert_gap_free, wait_for

MESSAGE = DEMO_SCRIPT[3]["args"]["message"]
CHECK = {"tool": "run_check", "args": {"check_id": "tests"}}
PUBLISH = {"tool": "publish", "args": {"message": MESSAGE}}
# The demo, with a model that checks and publishes again when told the evidence is gone.
RECHECKING = {"kind": "scripted", "script": [*DEMO_SCRIPT[:4], CHECK, PUBLISH, DEMO_SCRIPT[4]]}
# The simulated world's script with three different publishes, each asking a reviewer.
THREE_PUBLISHES = [*SCRIPT[:4], call("publish", message="a second note"), call("publish", message="a third note"), SCRIPT[4]]

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def resumes(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    woken: list[str] = []
    monkeypatch.setattr("runs.scheduling.queue.enqueue_resume", woken.append)
    monkeypatch.setattr("runs.control.enqueue_resume", woken.append)
    return woken


def drive(world: World, run: Run, clock: Clock | None = None) -> RunState:
    run.refresh_from_db()
    return drive_run(run, world.environment(), DjangoApprovals(run), clock=clock, controls=KillFlag(str(run.pk)))


def waiting_run(operator: User, clock: Clock | None = None) -> tuple[World, Run, ApprovalRequest]:
    world = World()
    run = world.create(actor=operator)
    state = drive(world, run, clock)
    assert state.status == "waiting_approval"
    return world, run, ApprovalRequest.objects.get(run=run)


def lifetime(request: ApprovalRequest) -> int:
    return round((request.expires_at - request.created_at).total_seconds())


def exits(run: Run) -> list[str]:
    return [e.payload["exit"] for e in Event.objects.filter(run=run, type="wait_ended").order_by("seq")]


def next_pending(run: Run, after: ApprovalRequest, worker: Worker, timeout: float = 90) -> ApprovalRequest:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = ApprovalRequest.objects.filter(run=run, status="pending").exclude(pk=after.pk).first()
        if found is not None:
            return found
        run.refresh_from_db()
        assert run.status in ("running", "waiting_approval"), (run.outcome, run.stop_message)
        time.sleep(0.1)
    raise AssertionError(f"no new request: {worker.log()[-3000:]}")


# -- case 2: the workspace changes under a pending approval ---------------------------


@pytest.mark.celery
@pytest.mark.docker
def test_it_stops_a_run_whose_workspace_changed_around_the_harness_under_a_grant(
    celery_worker: Worker, operator: User, reviewer: User
) -> None:
    """Only the harness's tools write a workspace, so a revision cannot move under a
    waiting request by any legitimate path (staleness by revision is the core's rule,
    exercised by the state machine; here by policy, below). A change that came around
    the harness is found when the run is picked up again: the grant is never used."""
    run = wait_for(create_run(DEMO_CONTRACT, RECHECKING, operator), ("waiting_approval",), timeout=120, log=celery_worker.log)
    first = ApprovalRequest.objects.get(run=run, status="pending")
    (workspace_for(run).dir / "NOTES.md").write_text("changed while the request waited\n")
    grant(first, reviewer)
    run = wait_for(run, ("complete", "stopped"), timeout=90, log=celery_worker.log)
    assert run.outcome == "revision_mismatch", run.stop_message
    # The requests are cancelled right after the stop is stored (the loop's last step).
    deadline = time.monotonic() + 30
    while first.status != "cancelled" and time.monotonic() < deadline:
        time.sleep(0.05)
        first.refresh_from_db()
    assert first.status == "cancelled" and first.consumed_at is None
    assert_gap_free(run)
    assert run.report.data["effects_applied"] == []


@pytest.mark.postgres
def test_it_leaves_the_wait_as_stale_and_runs_on_when_the_workspace_moved(operator: User, reviewer: User, resumes: list[str]) -> None:
    world, run, request = waiting_run(operator)
    grant(request, reviewer)
    world.workspace.files["src/notes.txt"] = "moved on\n"
    state = drive(world, run)
    request.refresh_from_db()
    assert request.status == "stale"
    assert exits(run) == ["stale"]
    # Back through the gates: the evidence is for the old revision, so check_required,
    # and the run goes on (its script then finishes without a check).
    assert Event.objects.filter(run=run, type="check_required", payload__for_tool="publish").count() == 1
    assert state.outcome == "proposals_exhausted"
    assert world.executor.outbox == {}
    # A further resume adds nothing: the run is not stranded in a wait.
    count = Event.objects.filter(run=run).count()
    drive(world, run)
    assert Event.objects.filter(run=run).count() == count


# -- case 3: the request expires --------------------------------------------------------


@pytest.mark.celery
@pytest.mark.docker
def test_it_stops_approval_expired_when_nobody_decides_in_time(celery_worker: Worker, operator: User) -> None:
    new_policy_version(approval_ttl_seconds=4)
    run = wait_for(create_run(DEMO_CONTRACT, RECHECKING, operator), ("waiting_approval",), timeout=120, log=celery_worker.log)
    request = ApprovalRequest.objects.get(run=run)
    assert lifetime(request) == 4
    # The beat expires the request and the worker ends the wait.
    run = wait_for(run, ("stopped", "complete"), timeout=60, log=celery_worker.log)
    assert run.outcome == "approval_expired", run.stop_message
    request.refresh_from_db()
    assert request.status == "expired"
    assert exits(run) == ["expired"]
    assert_gap_free(run)
    assert not pending_requests().filter(run=run).exists()


def test_it_refuses_a_grant_after_expiry_and_the_run_stops(operator: User, reviewer: User, resumes: list[str]) -> None:
    world, run, request = waiting_run(operator)
    ApprovalRequest.objects.filter(pk=request.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    with pytest.raises(DecisionRefused, match="expired"):
        grant(ApprovalRequest.objects.get(pk=request.pk), reviewer)
    assert drive(world, run).outcome == "approval_expired"


# -- case 4: waiting is not working time ------------------------------------------------


def test_it_does_not_spend_the_wall_time_on_waiting_for_a_reviewer(operator: User, reviewer: User, resumes: list[str]) -> None:
    """The demo's 600 s wall time and the policy's 3600 s TTL: a grant at 640 s."""
    clock = FakeClock(time.time())
    world, run, request = waiting_run(operator, clock)
    assert lifetime(request) == 3600
    clock.t += 640
    grant(request, reviewer)
    state = drive(world, run, clock)
    assert state.outcome == "complete", state.stop_message
    assert len(world.executor.outbox) == 1
    assert state.waited_seconds == pytest.approx(640)
    assert state.deadline == pytest.approx(state.started_at + 600 + 640)
    assert Event.objects.get(run=run, type="wait_ended").payload["waited_seconds"] == pytest.approx(640)
    run.refresh_from_db()
    assert run.report.data["waited_seconds"] == pytest.approx(640)


def test_it_shows_working_time_and_waiting_time_apart(operator: User, resumes: list[str]) -> None:
    clock = FakeClock(time.time())
    _, run, _ = waiting_run(operator, clock)
    state = dict(run.state)
    now = time.time()
    # Started 1000 s ago, and a reviewer has kept it waiting for the last 700 s.
    state.update(started_at=now - 1000, waiting_since=now - 700)
    Run.objects.filter(pk=run.pk).update(state=state)
    run.refresh_from_db()
    summary = run_summary(run)
    time_budget = next(b for b in summary["budgets"] if b["name"] == "time")
    assert summary["waited_seconds"] == pytest.approx(700, abs=2)
    assert summary["working_seconds"] == pytest.approx(300, abs=2) and time_budget["used"] == pytest.approx(300, abs=2)


def test_it_bounds_a_request_by_what_is_left_of_the_policy_limit_on_waiting(operator: User, reviewer: User, resumes: list[str]) -> None:
    new_policy_version(max_wait_seconds=100)
    clock = FakeClock(time.time())
    world = World()
    run = world.create(actor=operator, script=THREE_PUBLISHES)
    drive(world, run, clock)
    first = ApprovalRequest.objects.get(run=run)
    assert lifetime(first) == 100
    clock.t += 70
    grant(first, reviewer)
    drive(world, run, clock)
    second = ApprovalRequest.objects.exclude(pk=first.pk).get(run=run)
    # 70 s of the 100 s are used: the next request lives 30 s, never longer.
    assert lifetime(second) == 30
    clock.t += 30
    grant(second, reviewer)
    state = drive(world, run, clock)
    assert state.outcome == "approval_expired" and "limit of 100s" in state.stop_message
    assert ApprovalRequest.objects.filter(run=run).count() == 2  # no third request offered
    summary = run_summary(Run.objects.get(pk=run.pk))
    assert any(b["name"] == "waiting" and b["limit"] == 100 for b in summary["budgets"])


# -- case 5: a stopped run's requests leave the queue ----------------------------------


@pytest.mark.celery
@pytest.mark.docker
def test_it_cancels_the_requests_of_killed_and_globally_stopped_runs(
    celery_worker: Worker, operator: User, client: Client, reviewer: User
) -> None:
    runs = [create_run(DEMO_CONTRACT, RECHECKING, operator) for _ in range(2)]
    runs = [wait_for(run, ("waiting_approval",), timeout=120, log=celery_worker.log) for run in runs]
    client.force_login(reviewer)
    assert client.get("/approvals/count/").json() == {"pending": 2}
    kill(runs[0], operator)
    assert client.get("/approvals/count/").json() == {"pending": 1}  # at once, worker or not
    set_global(operator, stop_all=True, admit_new=True)
    assert client.get("/approvals/count/").json() == {"pending": 0}
    try:
        for run in runs:
            run = wait_for(run, ("stopped",), timeout=60, log=celery_worker.log)
            assert run.outcome == "killed"
            request = ApprovalRequest.objects.get(run=run)
            assert request.status == "cancelled" and "the run is being stopped" in request.reason
            assert exits(run) == ["cancelled"]
            assert_gap_free(run)
    finally:
        set_global(operator, stop_all=False, admit_new=True)


@pytest.mark.postgres
def test_it_refuses_to_decide_a_request_of_a_run_being_stopped(operator: User, reviewer: User, resumes: list[str]) -> None:
    world, run, request = waiting_run(operator)
    do_kill(run, "otto")
    with pytest.raises(DecisionRefused, match="already cancelled"):
        deny(ApprovalRequest.objects.get(pk=request.pk), reviewer, "too late")
    assert drive(world, run).outcome == "killed"
    assert list(Event.objects.filter(run=run, type="approval_lapsed").values_list("payload__status", flat=True)) == ["cancelled"]


def test_it_cancels_open_requests_when_the_run_stops_for_its_deadline(
    operator: User, resumes: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = FakeClock(time.time())
    world, run, request = waiting_run(operator, clock)
    # A wait is no working time, so only a hand-moved deadline runs out during one,
    # which no event explains: the suite's fold check is off for this run.
    monkeypatch.setattr(settings, "HARNESS_VERIFY_FOLD", False)
    run.refresh_from_db()
    state = dict(run.state)
    state["deadline"] = clock.t - 1  # the working time ran out while it waited
    state["waiting_since"] = None
    Run.objects.filter(pk=run.pk).update(state=state)
    assert drive(world, run, clock).outcome == "deadline"
    request.refresh_from_db()
    assert request.status == "cancelled" and "deadline" in request.reason


# -- policy changes reach runs in flight ------------------------------------------------


@pytest.mark.postgres
def test_it_makes_a_request_stale_when_the_policy_changes_and_decides_under_the_new_one(
    operator: User, reviewer: User, resumes: list[str]
) -> None:
    world, run, request = waiting_run(operator)
    new_policy_version(publish="allow")
    with pytest.raises(DecisionRefused, match="stale"):
        grant(request, reviewer)
    state = drive(world, run)
    assert state.outcome == "complete"
    request.refresh_from_db()
    assert request.status == "stale"
    admitted = Event.objects.get(run=run, type="call_admitted", payload__tool="publish").payload
    assert admitted["decision"] == "allow" and admitted["policy_version"] == request.policy_version + 1
    assert Event.objects.filter(run=run, type="policy_changed").count() == 1


@pytest.mark.postgres
def test_it_stops_tool_denied_when_the_new_policy_denies_the_waiting_call(operator: User, resumes: list[str]) -> None:
    world, run, _ = waiting_run(operator)
    new_policy_version(publish="deny")
    assert drive(world, run).outcome == "tool_denied"
    assert world.executor.outbox == {}


# -- the sweep repairs rows that break the invariants ---------------------------------


@pytest.mark.postgres
def test_it_cancels_a_pending_request_whose_run_is_not_waiting_and_records_it(operator: User, resumes: list[str]) -> None:
    _, run, request = waiting_run(operator)
    # As if the worker died between the run's last checkpoint and cancelling.
    Run.objects.filter(pk=run.pk).update(status=Run.Status.STOPPED, outcome="killed")
    assert invariants.cancel_orphaned_requests() == 1
    request.refresh_from_db()
    assert request.status == "cancelled"
    repaired = Event.objects.get(run=run, type="invariant_repaired")
    assert repaired.payload["request_id"] == str(request.pk) and "belongs to a run waiting" in repaired.payload["invariant"]
    assert invariants.cancel_orphaned_requests() == 0
    assert_gap_free(run)


@pytest.mark.postgres
def test_it_wakes_a_run_waiting_on_nothing_and_records_it_once(operator: User, resumes: list[str]) -> None:
    world, run, request = waiting_run(operator)
    # A run stranded the old way: its request went stale and nobody woke it.
    long_ago = timezone.now() - timedelta(seconds=settings.HARNESS_LEASE_SECONDS + 5)
    ApprovalRequest.objects.filter(pk=request.pk).update(status="stale", decided_at=long_ago, reason="workspace moved")
    assert invariants.waits_to_end() == [str(run.pk)]
    assert invariants.waits_to_end() == [str(run.pk)]
    assert Event.objects.filter(run=run, type="invariant_repaired").count() == 1
    drive(world, run)
    # Stale: back through the gates, which ask a reviewer again for the same revision.
    assert exits(run) == ["stale"]
    assert ApprovalRequest.objects.get(run=run, status="pending").pk != request.pk
    assert invariants.waits_to_end() == []


@pytest.mark.postgres
def test_it_leaves_a_run_with_a_fresh_decision_to_its_wake_up(operator: User, reviewer: User, resumes: list[str]) -> None:
    _, run, request = waiting_run(operator)
    grant(request, reviewer)
    assert invariants.waits_to_end() == [str(run.pk)]
    assert not Event.objects.filter(run=run, type="invariant_repaired").exists()


# -- the lifecycle as data -------------------------------------------------------------


def test_it_allows_only_the_request_transitions_of_the_table() -> None:
    check_request_transition("pending", "cancelled")
    check_request_transition("granted", "stale")
    for old, new in [("consumed", "granted"), ("denied", "granted"), ("cancelled", "pending"), ("pending", "consumed")]:
        with pytest.raises(IllegalTransition):
            check_request_transition(old, new)


def test_it_documents_every_way_out_of_a_wait() -> None:
    table = (Path(__file__).resolve().parent.parent / "docs" / "reliability.md").read_text()
    rows = [line for line in table.splitlines() if line.startswith("| ") and "`wait_ended`" in line]
    assert len(rows) == len(WAIT_EXITS)
    for (exit, transition), row in zip(WAIT_EXITS.items(), rows, strict=True):
        assert f"`wait_ended` {exit}" in row and f"| `{transition.request}` |" in row
        assert transition.outcome is None or f"`{transition.outcome}`" in row
