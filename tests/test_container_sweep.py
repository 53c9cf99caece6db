"""The sweep of sandbox containers: every container the sandbox makes for a run
carries the run's id and its role; the sweep keeps every container of a run that
is running or waiting while a driver holds its lease, whatever the role, and
removes those of runs that ended, of runs that do not exist, and of runs nobody has
driven for a lease period past its end (docs/design.md, Recovery)."""

from __future__ import annotations

import re
import time

import pytest
from django.conf import settings

from approvals.policies import current_policy_row
from runs.models import Event
from runs.runtime import create_run
from tests.fixtures_services import Worker
from tests.helpers import new_policy_version
from tests.runs_waiting import DEMO_CONTRACT, wait_for

pytestmark = [pytest.mark.docker]

PINNED_SECONDS = 8


def sweeps_done(log: str) -> int:
    return len(re.findall(r"Task sandbox\.sweep\[[^\]]+\] succeeded", log))


def containers_of(client, run_id: str) -> list[dict]:
    # Sparse: one list call, no inspect per container (which races a removal).
    return [c.attrs for c in client.containers.list(all=True, sparse=True, filters={"label": f"harness.run_id={run_id}"})]


@pytest.fixture
def sweeping_worker(transactional_db: None, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest) -> Worker:
    """A real worker whose beat sweeps the containers every second."""
    monkeypatch.setenv("HARNESS_BEAT_CONTAINERS_SECONDS", "1")
    worker: Worker = request.getfixturevalue("celery_worker")
    return worker


@pytest.mark.celery
def test_it_keeps_a_pinned_image_checks_container_through_sweeps_and_the_check_passes_at_its_first_attempt(
    sweeping_worker: Worker, operator, docker_engine
) -> None:
    # The sandbox image under another name: a check pinned to it gets a container of its own.
    image = docker_engine.images.get(settings.SANDBOX_IMAGE).id
    pinned = {"check_id": "pinned", "command": ["sleep", str(PINNED_SECONDS)], "version": "1", "timeout_seconds": 60, "image": image}
    new_policy_version(checks=[*current_policy_row().document["checks"], pinned])
    contract = {**DEMO_CONTRACT, "verification_targets": ["pinned"]}
    script = [{"tool": "run_check", "args": {"check_id": "pinned"}}, {"tool": "finish", "args": {"summary": "checked"}}]
    run = create_run(contract, {"kind": "scripted", "script": script}, operator)
    deadline = time.monotonic() + 60
    while not Event.objects.filter(run=run, type="call_started").exists():
        assert time.monotonic() < deadline, sweeping_worker.log()[-3000:]
        time.sleep(0.1)
    before, containers = sweeps_done(sweeping_worker.log()), []
    while not Event.objects.filter(run=run, type="receipt_recorded").exists():
        assert time.monotonic() < deadline + 60, sweeping_worker.log()[-3000:]
        containers = containers_of(docker_engine, str(run.pk))
        time.sleep(0.2)
    swept = sweeps_done(sweeping_worker.log()) - before
    run = wait_for(run, ("complete", "stopped"), timeout=60, log=sweeping_worker.log)
    assert run.outcome == "complete", (run.outcome, run.stop_message)
    attempts = list(Event.objects.filter(run=run, type="call_started").values_list("payload__attempt", flat=True))
    assert attempts == [1], f"the pinned check took attempts {attempts}"
    assert swept >= 3, f"only {swept} sweeps crossed the check"
    assert {c["Labels"]["harness.run_id"] for c in containers} == {str(run.pk)}
    roles = sorted(c["Labels"].get("harness.role", "") for c in containers)
    assert len(roles) == 2 and roles[0] == "main" and roles[1].startswith("pinned-"), containers
