"""Redis is the broker and the live stream, never the record: a Redis restart in
the middle of a run loses no event and no approval, and the run finishes."""

from __future__ import annotations

import contextlib
import os
import subprocess
import time

import pytest
import redis
from django.conf import settings
from django.contrib.auth.models import User

from approvals.models import ApprovalRequest
from runs.approval_flow.flow import grant
from runs.models import Event
from runs.runtime import create_run
from tests.fixtures_services import ROOT, Worker
from tests.runs_waiting import DEMO_CONTRACT, SCRIPTED_DEMO, assert_gap_free, wait_for

pytestmark = [pytest.mark.celery, pytest.mark.docker]


def restart_redis() -> None:
    """Stop Redis without saving (this machine's Redis keeps nothing on disk, so
    every queued message is gone) and start it again."""
    client = redis.Redis.from_url(settings.REDIS_URL)
    # it closes the connection as it goes down
    with contextlib.suppress(redis.ConnectionError):
        client.shutdown(nosave=True)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            client.ping()
            time.sleep(0.05)
        except redis.ConnectionError:
            break
    subprocess.run(["bash", "scripts/services.sh"], cwd=ROOT, env={**os.environ, "HARNESS_NEED_POSTGRES": "0"}, check=True)
    redis.Redis.from_url(settings.REDIS_URL).ping()


def test_it_finishes_the_run_across_redis_restarts_without_losing_events_or_approvals(
    celery_worker: Worker, operator: User, reviewer: User
) -> None:
    run = create_run(DEMO_CONTRACT, SCRIPTED_DEMO, operator)
    deadline = time.monotonic() + 60
    while not Event.objects.filter(run=run, type="call_started").exists():
        assert time.monotonic() < deadline, celery_worker.log()[-3000:]
        time.sleep(0.02)
    restart_redis()  # mid-run: the live stream and any queued message are lost
    run = wait_for(run, ("waiting_approval",), timeout=90, log=celery_worker.log)
    request = ApprovalRequest.objects.get(run=run, status="pending")
    grant(request, reviewer)
    restart_redis()  # the resume message the grant sent is gone with it
    run = wait_for(run, ("complete", "stopped"), timeout=90, log=celery_worker.log)
    assert run.outcome == "complete", run.stop_message
    types = assert_gap_free(run)
    assert types.count("approval_decided") == 1 and types.count("approval_consumed") == 1
    request.refresh_from_db()
    assert request.status == "consumed"
    assert len(run.report.data["effects_applied"]) == 1
    # The worker may exit on the broker's disappearance (a kombu error it cannot
    # recover from); a supervisor restarting it is all it takes.
    print(f"worker restarted by its supervisor {celery_worker.restarts} time(s)")
