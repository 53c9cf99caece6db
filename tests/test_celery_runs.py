"""Runs driven by a real Celery worker process against the local Redis, executing
in the Docker sandbox: wait for approval, resume on grant, and the kill switch."""

from __future__ import annotations

import time

import docker
import pytest
from django.contrib.auth.models import User
from docker.models.containers import Container

from approvals.models import ApprovalRequest, PolicyVersion
from approvals.policies import current_policy_row
from runs.approval_flow.flow import grant
from runs.control import kill
from runs.models import Event, Run
from runs.runtime import create_run
from tests.fixtures_services import Worker
from tests.runs_waiting import DEMO_CONTRACT, SCRIPTED_DEMO, assert_gap_free, wait_for

pytestmark = [pytest.mark.celery, pytest.mark.docker]


def containers_of(run: Run) -> list[Container]:
    client = docker.from_env()
    # Sparse: one list call, no inspect per container, which raced the kill's removal (404).
    containers: list[Container] = client.containers.list(all=True, sparse=True, filters={"label": f"harness.run_id={run.pk}"})
    return containers


def test_it_runs_the_demo_on_a_worker_waits_for_approval_and_completes_after_a_grant(
    celery_worker: Worker, operator: User, reviewer: User
) -> None:
    run = create_run(DEMO_CONTRACT, SCRIPTED_DEMO, operator)
    run = wait_for(run, ("waiting_approval", "complete", "stopped"), log=celery_worker.log)
    assert run.status == "waiting_approval", run.outcome
    request = ApprovalRequest.objects.get(run=run, status="pending")
    assert request.tool == "publish" and "orders/total.py" in request.diff
    assert request.evidence and request.evidence[0]["passed"]
    grant(request, reviewer)
    run = wait_for(run, ("complete", "stopped"), log=celery_worker.log)
    assert run.outcome == "complete", run.stop_message
    types = assert_gap_free(run)
    assert types.count("approval_consumed") == 1
    assert run.report.data["effects_applied"]
    deadline = time.monotonic() + 10
    while containers_of(run) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert containers_of(run) == []


# The slow check's own length: a kill is seen to land when the container goes before
# it (how soon is bench/kill_latency.py's figure, not an assertion).
SLOW_CHECK_SECONDS = 120


def slow_check_policy() -> None:
    row = current_policy_row()
    document = dict(row.document)
    document["checks"] = [*document["checks"], {"check_id": "slow", "command": ["sleep", str(SLOW_CHECK_SECONDS)], "timeout_seconds": 300}]
    document["version"] = row.version + 1
    PolicyVersion.objects.create(version=row.version + 1, document=document, note="a slow check")


def test_it_kills_a_running_check_and_removes_the_container(celery_worker: Worker, operator: User) -> None:
    slow_check_policy()
    contract = {**DEMO_CONTRACT, "verification_targets": ["slow"]}
    script = {"kind": "scripted", "script": [{"tool": "run_check", "args": {"check_id": "slow"}}]}
    run = create_run(contract, script, operator)
    deadline = time.monotonic() + 60
    while not Event.objects.filter(run=run, type="call_started").exists():
        assert time.monotonic() < deadline, celery_worker.log()[-3000:]
        time.sleep(0.05)
    time.sleep(0.5)  # the check is executing in the container now
    clicked = time.monotonic()
    kill(run, operator)
    while containers_of(run):
        assert time.monotonic() - clicked < SLOW_CHECK_SECONDS, "container still there when the check would have ended by itself"
        time.sleep(0.05)
    run = wait_for(run, ("stopped",), timeout=SLOW_CHECK_SECONDS, log=celery_worker.log)
    assert run.outcome == "killed"
    assert_gap_free(run)
