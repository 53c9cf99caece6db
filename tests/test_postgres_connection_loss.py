"""PostgreSQL connection loss in the middle of a run: every connection of the
worker is terminated by the server; the run is picked up again and finishes with
nothing lost or done twice. (PostgreSQL only: SQLite has no connection to lose.)"""

from __future__ import annotations

import time

import psycopg
import pytest
from django.contrib.auth.models import User
from django.db import connection

from approvals.models import ApprovalRequest
from runs.approval_flow.flow import grant
from runs.models import Event
from runs.runtime import create_run
from tests.fixtures_services import Worker, database_url
from tests.runs_waiting import DEMO_CONTRACT, SCRIPTED_DEMO, assert_gap_free, wait_for

pytestmark = [pytest.mark.celery, pytest.mark.docker, pytest.mark.postgres_only]


def terminate_other_connections() -> int:
    with psycopg.connect(database_url().replace("postgres://", "postgresql://"), autocommit=True) as admin:
        rows = admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"
        ).fetchall()
    return len(rows)


def test_it_finishes_the_run_after_the_database_drops_every_connection(celery_worker: Worker, operator: User, reviewer: User) -> None:
    assert connection.vendor == "postgresql"
    run = create_run(DEMO_CONTRACT, SCRIPTED_DEMO, operator)
    deadline = time.monotonic() + 60
    while not Event.objects.filter(run=run, type="call_started").exists():
        assert time.monotonic() < deadline, celery_worker.log()[-3000:]
        time.sleep(0.02)
    assert terminate_other_connections() >= 1  # the test's own connection goes too
    connection.close()
    run = wait_for(run, ("waiting_approval",), timeout=90, log=celery_worker.log)
    grant(ApprovalRequest.objects.get(run=run, status="pending"), reviewer)
    terminate_other_connections()
    connection.close()
    run = wait_for(run, ("complete", "stopped"), timeout=90, log=celery_worker.log)
    assert run.outcome == "complete", run.stop_message
    types = assert_gap_free(run)
    assert types.count("run_started") == 1 and types.count("approval_consumed") == 1
    assert len(run.report.data["effects_applied"]) == 1
