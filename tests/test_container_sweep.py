"""The sweep of sandbox containers: every container the sandbox makes for a run
carries the run's id and its role; the sweep keeps every container of a run that
is running or waiting while a driver holds its lease, whatever the role, and
removes those of runs that ended, of runs that do not exist, and of runs nobody has
driven for a lease period past its end (docs/design.md, Recovery)."""

from __future__ import annotations

import re
import time
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

import docker
import pytest
from django.conf import settings
from django.contrib.auth.models import User
from django.utils import timezone

from approvals.policies import current_policy_row
from runs.container_sweep import sweep
from runs.models import Event, Run
from runs.runtime import create_run, prepare_workspace_for
from runs.services import check_new_run, do_create_run
from sandbox.container.orphans import containers_by_run, sweep_orphans
from sandbox.container.spec import ROLE_MAIN, ContainerSpec, create_container, pinned_role
from tests.fixtures_sandbox import SCOPE
from tests.fixtures_services import Worker
from tests.helpers import new_policy_version
from tests.runs_waiting import DEMO_CONTRACT, SCRIPTED_DEMO, wait_for

pytestmark = [pytest.mark.docker]

PINNED_SECONDS = 8
SPEC = ContainerSpec(image=settings.SANDBOX_IMAGE)
PINNED = pinned_role("harness-sandbox:pinned")


def sweeps_done(log: str) -> int:
    return len(re.findall(r"Task sandbox\.sweep\[[^\]]+\] succeeded", log))


def containers_of(client: docker.DockerClient, run_id: str) -> list[dict[str, Any]]:
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
    sweeping_worker: Worker, operator: User, docker_engine: docker.DockerClient
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


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_it_removes_the_containers_of_ended_and_undriven_runs_and_keeps_every_role_of_driven_ones(
    docker_engine: docker.DockerClient, tmp_path: Path
) -> None:
    now = timezone.now()
    lease = timedelta(seconds=settings.HARNESS_LEASE_SECONDS)
    leased: dict[str, object] = {"lease_owner": "a live worker", "lease_token": 1}
    # run: (status, lease fields, roles of its containers, kept?)
    table: dict[str, tuple[str, dict[str, object], list[str], bool]] = {
        "complete": (Run.Status.COMPLETE, {}, [ROLE_MAIN, PINNED], False),
        "stopped": (Run.Status.STOPPED, {}, [PINNED], False),
        "driven": (Run.Status.RUNNING, {**leased, "lease_expires_at": now + lease}, [ROLE_MAIN, PINNED], True),
        # A waiting run being resumed: its driver starts the container before the wait ends.
        "resumed": (Run.Status.WAITING, {**leased, "lease_expires_at": now + lease}, [ROLE_MAIN], True),
        # Late to renew: the lease sweep's takeover comes first, and reuses it.
        "late": (Run.Status.RUNNING, {**leased, "lease_expires_at": now - lease / 2}, [PINNED], True),
        "abandoned": (Run.Status.RUNNING, {**leased, "lease_expires_at": now - 3 * lease}, [ROLE_MAIN, PINNED], False),
        "waiting": (Run.Status.WAITING, {"lease_token": 1}, [ROLE_MAIN], False),
    }
    runs = {}
    for name, (status, fields, roles, _) in table.items():
        run = do_create_run(check_new_run(DEMO_CONTRACT, SCRIPTED_DEMO), None, prepare_workspace_for)
        Run.objects.filter(pk=run.pk).update(status=status, **fields)
        runs[name] = str(run.pk)
        for role in roles:
            create_container(docker_engine, str(run.pk), role, str(tmp_path), SPEC, SCOPE)
    nobodys = ["not-a-run", str(uuid.uuid4())]  # a label that is no run id, and a run that does not exist
    for label in nobodys:
        create_container(docker_engine, label, ROLE_MAIN, str(tmp_path), SPEC, SCOPE)
    try:
        removed = sweep(SCOPE)
        left = containers_by_run(scope=SCOPE, client=docker_engine)
    finally:
        sweep_orphans([], scope=SCOPE, client=docker_engine)

    kept = [name for name, row in table.items() if row[3]]
    assert set(left) == {runs[name] for name in kept}
    assert {name: len(left[runs[name]]) for name in kept} == {name: len(table[name][2]) for name in kept}  # every role
    assert sorted(removed) == sorted([*(runs[name] for name in table if name not in kept), *nobodys])
    for name in ("abandoned", "waiting"):  # claimed for the removal, and let go
        row = Run.objects.get(pk=runs[name])
        assert (row.lease_expires_at, row.lease_owner, row.lease_token) == (None, "", 2), name
    assert Run.objects.get(pk=runs["driven"]).lease_token == 1
