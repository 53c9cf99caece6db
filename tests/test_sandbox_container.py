"""The run's container: created with the sandbox defaults and the policy's limits,
reused by a resumed run, removed at the end or by the sweeper; and the demo task
end to end through the services with the real sandbox environment."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import docker
import pytest
from django.conf import settings
from docker.errors import NotFound

from core.policy import SandboxLimits
from core.simulated import MemoryApprovals
from runs.persistence.outbox import published_patch
from sandbox.container.orphans import sweep_orphans
from sandbox.container.output import OutputCapture
from sandbox.container.sandbox_container import SandboxContainer
from sandbox.container.seccomp import security_option
from sandbox.container.spec import LABEL_MANAGED, LABEL_RUN, LABEL_SCOPE, SANDBOX_ENV
from sandbox.workspace import hashing
from tests.fixtures_sandbox import ROOT, SCOPE, example_workspace, start_container

pytestmark = [pytest.mark.docker]


def test_it_creates_the_container_with_the_sandbox_defaults(
    docker_engine: docker.DockerClient, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("WORKER_ONLY_SECRET", "do-not-leak")
    workspace = example_workspace(tmp_path / "defaults")
    limits = SandboxLimits(memory="300m", cpus=0.5, pids_limit=50)
    container = start_container("defaults", workspace, limits)
    try:
        attrs = docker_engine.containers.get(container.id).attrs
    finally:
        container.remove()
    host, config = attrs["HostConfig"], attrs["Config"]
    assert host["NetworkMode"] == "none" and host["ReadonlyRootfs"] is True
    assert host["CapDrop"] == ["ALL"] and host["SecurityOpt"] == ["no-new-privileges", security_option()] and host["Privileged"] is False
    assert (host["Memory"], host["MemorySwap"], host["NanoCpus"], host["PidsLimit"]) == (300 * 2**20, 300 * 2**20, 500_000_000, 50)
    assert host["Tmpfs"] == {"/tmp": "rw,noexec,nosuid,nodev,size=256m"}  # scratch, bounded by the kernel
    assert host["Runtime"] == "runc"
    assert [(m["Type"], m["Source"], m["Destination"], m["RW"]) for m in attrs["Mounts"]] == [
        ("bind", str(workspace.dir.resolve()), "/workspace", False)  # checks observe, never change
    ]
    assert config["User"] == "65534:65534" and config["WorkingDir"] == "/workspace"
    assert not [e for e in config["Env"] if e.split("=", 1)[0] not in {"PATH", *SANDBOX_ENV}]
    assert config["Labels"][LABEL_RUN] == "defaults" and config["Labels"][LABEL_MANAGED] == "1"
    assert container.image_digest == attrs["Image"] and container.image_digest.startswith("sha256:")
    assert container.image_digest == docker_engine.images.get(settings.SANDBOX_IMAGE).id


def test_it_reuses_a_runs_container_and_sweeps_orphans(docker_engine: docker.DockerClient, tmp_path: Path) -> None:
    active, orphan = f"active-{uuid.uuid4().hex[:6]}", f"orphan-{uuid.uuid4().hex[:6]}"
    first = start_container(active, example_workspace(tmp_path / active))
    # A dead driver's check, still running in the container, writing to the workspace.
    leftover = docker_engine.api.exec_create(first.id, ["sh", "-c", "while true; do date > late.txt; sleep 0.1; done"], user="65534:65534")
    docker_engine.api.exec_start(leftover["Id"], detach=True)
    again = start_container(active, example_workspace(tmp_path / active))
    assert again.id == first.id  # a resumed run finds its container
    processes = [p[-1] for p in docker_engine.containers.get(first.id).top()["Processes"]]
    assert len(processes) == 1 and "python3" in processes[0], f"the previous driver's check outlived it: {processes}"
    other_limits = start_container(active, example_workspace(tmp_path / active), SandboxLimits(memory="128m"))
    assert other_limits.id != first.id  # changed policy limits: a new container
    with pytest.raises(NotFound):
        docker_engine.containers.get(first.id)
    dead = start_container(orphan, example_workspace(tmp_path / orphan))
    removed = sweep_orphans({active}, scope=SCOPE)
    assert removed == [orphan]
    with pytest.raises(NotFound):
        docker_engine.containers.get(dead.id)
    assert docker_engine.containers.get(other_limits.id).labels[LABEL_SCOPE] == SCOPE
    other_limits.remove()
    other_limits.remove()  # idempotent
    assert sweep_orphans(set(), scope=f"{SCOPE}-nobody") == []


def test_it_restarts_a_stopped_container_for_the_next_check(docker_engine: docker.DockerClient, tmp_path: Path) -> None:
    container: SandboxContainer = start_container("revive", example_workspace(tmp_path / "revive"))
    try:
        docker_engine.api.kill(container.id)
        capture = OutputCapture(1000)
        result = container.exec(["echo", "back"], timeout_seconds=10, capture=capture)
        assert result.exit_code == 0 and bytes(capture.head) == b"back\n"
        capture.discard()
    finally:
        container.remove()


@pytest.mark.django_db(transaction=True)
def test_it_runs_the_demo_until_publish_waits_for_approval(docker_engine: docker.DockerClient) -> None:
    from approvals.policies import load_policy
    from core.fences import Lease
    from runs.runtime import prepare_workspace_for, sandbox_environment, workspace_root
    from runs.services import check_new_run, do_create_run, drive_run

    contract = json.loads((ROOT / "examples" / "demo" / "contract.json").read_text())
    script = json.loads((ROOT / "examples" / "demo" / "proposals.json").read_text())
    run = do_create_run(check_new_run(contract, {"kind": "scripted", "script": script}), None, prepare_workspace_for)
    assert (workspace_root(run) / "workspace" / "orders" / "total.py").exists()
    environment = sandbox_environment(run, load_policy(run.policy), Lease(run.lease_token))
    approvals = MemoryApprovals()
    try:
        state = drive_run(run, environment, approvals)
        assert state.status == "waiting_approval", (state.stop_reason, state.stop_message)
        ask = next(iter(approvals.requests.values()))
        assert ask.tool == "publish" and ask.revision == state.revision != state.base_revision
        (evidence,) = ask.evidence
        assert evidence["passed"] is True and evidence["revision"] == state.revision
        assert evidence["image_digest"] == docker_engine.images.get(settings.SANDBOX_IMAGE).id
        approvals.grant(ask.key)
        run.refresh_from_db()
        resumed = sandbox_environment(run, load_policy(run.policy), Lease(run.lease_token))  # the same container, reused
        state = drive_run(run, resumed, approvals)
        assert state.status == "complete", (state.stop_reason, state.stop_message)
        assert state.effects_applied == ["c4"]
        (published,) = [op for op in state.operations.values() if op.call_id == "c4" and op.status == "applied"]
        patch = published_patch(published.key)
        assert patch is not None and b'if line["quantity"] < 0:' in patch
    finally:
        environment.close()
    with pytest.raises(NotFound):
        docker_engine.containers.get(environment.executor.container.id)  # type: ignore[attr-defined]  # the sandbox's executor, typed as the port


@pytest.mark.django_db(transaction=True)
def test_it_starts_a_run_it_has_just_prepared_without_walking_its_workspace(
    docker_engine: docker.DockerClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run created by the web process is prepared by the worker that first drives
    it, which relies on what preparation proved: the first full walk is the one
    before the reviewer is shown the publish, after the run's first steps."""
    from runs.models import Event
    from runs.runtime import advance, check_workspace_for, workspace_root
    from runs.services import check_new_run, do_create_run

    contract = json.loads((ROOT / "examples" / "demo" / "contract.json").read_text())
    script = json.loads((ROOT / "examples" / "demo" / "proposals.json").read_text())
    run = do_create_run(check_new_run(contract, {"kind": "scripted", "script": script}), None, check_workspace_for)
    receipts_at_walks: list[int] = []
    real = hashing.TreeHasher.tree

    def counted(self: hashing.TreeHasher, root: Path, sink: hashing.TreeSink | None = None) -> str:
        if root == workspace_root(run) / "workspace":
            receipts_at_walks.append(Event.objects.filter(run_id=run.pk, type="receipt_recorded").count())
        return real(self, root, sink)

    monkeypatch.setattr(hashing.TreeHasher, "tree", counted)
    assert advance(str(run.pk)) == "waiting_approval"
    assert receipts_at_walks and receipts_at_walks[0] > 0, receipts_at_walks


@pytest.mark.django_db(transaction=True)
def test_it_stops_a_run_whose_pickup_walk_fails_and_removes_the_container_started_meanwhile(docker_engine: docker.DockerClient) -> None:
    """The container starts while the pickup's full walk verifies the workspace; a
    workspace changed around the harness stops the run, and its container goes."""
    from runs.runtime import advance, prepare_workspace_for, workspace_root
    from runs.services import check_new_run, do_create_run

    contract = json.loads((ROOT / "examples" / "demo" / "contract.json").read_text())
    script = json.loads((ROOT / "examples" / "demo" / "proposals.json").read_text())
    run = do_create_run(check_new_run(contract, {"kind": "scripted", "script": script}), None, prepare_workspace_for)
    (workspace_root(run) / "workspace" / "NOTES.md").write_text("written around the harness\n")
    assert advance(str(run.pk)) == "revision_mismatch"
    assert docker_engine.containers.list(all=True, filters={"label": [f"{LABEL_RUN}={run.pk}"]}) == []
