"""The container runtime is policy: runc by default or gVisor's runsc, chosen by the
admin per policy version and validated; an engine without the runtime gives a clear
error naming it; the run page shows the runtime a run used; checks report it."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import docker
import pytest
from django.conf import settings
from django.contrib.auth.models import User
from django.test import Client

from approvals.models import PolicyVersion
from approvals.policies import current_policy_row
from core.policy import SandboxLimits
from sandbox.container.sandbox_container import SandboxContainer
from sandbox.container.spec import ContainerSpec, RuntimeMissing
from tests.fixtures_runtimes import RuntimeEngine
from tests.fixtures_sandbox import SCOPE, SMOKE, TEST_LIMITS, drive, example_workspace, sandbox_policy, start_container, step
from tests.helpers import World
from tests.test_policy_admin import ADD, inline_form


@pytest.mark.django_db
def test_it_lets_the_admin_choose_the_runtime_per_policy_and_validates_it(client: Client, admin_user: User) -> None:
    client.force_login(admin_user)
    before = current_policy_row()
    data = inline_form(client)
    assert data["sandbox_runtime"] == "runc" and data["sandbox_scratch_mb"] == "256"
    data.update({"sandbox_runtime": "kata", "note": "stronger"})
    response = client.post(ADD, data)
    assert response.status_code == 200
    assert "Sandbox runtime: must be one of &#x27;runc&#x27; or &#x27;runsc&#x27;" in response.content.decode()
    assert "sandbox_runtime" in response.context["main_form"].errors
    assert PolicyVersion.objects.count() == 1 + (before.version - 1)
    data["sandbox_runtime"] = "runsc"
    assert client.post(ADD, data).status_code == 302
    newest = current_policy_row()
    assert newest.version == before.version + 1
    assert newest.document["sandbox"] == {**before.document["sandbox"], "runtime": "runsc"}


@pytest.mark.django_db
def test_it_shows_on_the_run_page_which_runtime_the_run_used(client: Client, reviewer: User) -> None:
    run = World().create()
    client.force_login(reviewer)
    assert "sandbox runtime runc" in client.get(f"/runs/{run.pk}/").content.decode()
    document = run.policy.document
    run.policy = PolicyVersion.objects.create(
        version=run.policy.version + 1, document={**document, "sandbox": {**document["sandbox"], "runtime": "runsc"}}
    )
    run.save(update_fields=["policy"])
    assert "sandbox runtime runsc" in client.get(f"/runs/{run.pk}/").content.decode()


@pytest.mark.docker
def test_it_refuses_a_runtime_the_engine_has_not_registered_naming_it(docker_engine: docker.DockerClient, tmp_path: Path) -> None:
    spec = ContainerSpec(image=settings.SANDBOX_IMAGE, runtime="harness-absent")
    with pytest.raises(RuntimeMissing) as refused:
        SandboxContainer.start("no-runtime", example_workspace(tmp_path / "ws").dir, spec, scope=SCOPE)
    message = str(refused.value)
    assert "the Docker engine has no runtime 'harness-absent'" in message and "sandbox.runtime" in message
    assert not docker_engine.containers.list(all=True, filters={"name": "no-runtime"})


@pytest.mark.docker
def test_it_stops_a_run_at_once_naming_a_runtime_the_engine_lacks(docker_engine: docker.DockerClient, tmp_path: Path, db: None) -> None:
    """A missing runtime stays missing until an operator acts: the run stops at its
    first check with sandbox_unavailable naming it, not after retries as if the
    failure were transient."""
    from runs.persistence.artifacts import ArtifactStorage
    from runs.persistence.outbox import DatabaseOutbox
    from sandbox.executor import SandboxExecutor
    from sandbox.tools.context import ToolSettings

    spec = dataclasses.replace(ContainerSpec.from_limits(TEST_LIMITS, settings.SANDBOX_IMAGE), runtime="harness-absent")
    executor = SandboxExecutor(
        "absent-runtime",
        example_workspace(tmp_path / "ws"),
        None,
        ArtifactStorage(),
        DatabaseOutbox(),
        ToolSettings(write_paths=("orders/*",)),
        spec=spec,
        scope=SCOPE,
    )
    outcome = drive(executor, sandbox_policy(), [step("run_check", check_id=SMOKE.check_id), step("finish")])
    assert outcome.state.outcome == "sandbox_unavailable", outcome.summary()
    assert "the Docker engine has no runtime 'harness-absent'" in outcome.state.stop_message
    assert "retrying would fail the same way" in outcome.state.stop_message
    assert not outcome.of_type("retry"), "a lasting failure is not retried"
    assert len(outcome.receipts("run_check")) == 1 and outcome.state.evidence == []
    assert not docker_engine.containers.list(all=True, filters={"name": "absent-runtime"})


@pytest.mark.docker
def test_it_runs_checks_under_each_runtime_and_reports_it(runtime_engine: RuntimeEngine, tmp_path: Path, db: None) -> None:
    from runs.persistence.artifacts import ArtifactStorage
    from runs.persistence.outbox import DatabaseOutbox
    from sandbox.executor import SandboxExecutor
    from sandbox.tools.context import ToolSettings

    limits: SandboxLimits = runtime_engine.limits(TEST_LIMITS)
    workspace = example_workspace(tmp_path / "ws")
    container = start_container(f"runtime-{runtime_engine.runtime}", workspace, limits)
    try:
        inspected = runtime_engine.client.containers.get(container.id).attrs["HostConfig"]
        assert inspected["Runtime"] == runtime_engine.runtime
        executor = SandboxExecutor("rt", workspace, container, ArtifactStorage(), DatabaseOutbox(), ToolSettings(write_paths=("orders/*",)))
        outcome = drive(executor, sandbox_policy(limits=limits), [step("run_check", check_id=SMOKE.check_id), step("finish")])
    finally:
        container.remove()
    assert outcome.receipt("run_check", "smoke")["data"]["runtime"] == runtime_engine.runtime
    assert outcome.state.outcome == "complete"
    assert json.loads(json.dumps(limits.model_dump()))["runtime"] == runtime_engine.runtime
