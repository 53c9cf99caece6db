"""The pool of pre-started containers (sandbox/container/pool.py): a pooled container is
a run's main container with every sandbox property (user, no network, read-only root,
no capability, seccomp, the run's limits, labels and name), sees the run's workspace
and nothing of any other run, is given to one run only, is removed by a kill at once,
and the pool is drained when its process ends or, if it died, by the sweep."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest
from django.conf import settings
from docker.errors import NotFound

from core.policy import SandboxLimits
from sandbox.container import pool as pool_module
from sandbox.container.orphans import containers_by_run, sweep_orphans
from sandbox.container.output import OutputCapture
from sandbox.container.pool import LABEL_POOL, ContainerPool
from sandbox.container.sandbox_container import SandboxContainer
from sandbox.container.seccomp import security_option
from sandbox.container.spec import LABEL_MANAGED, LABEL_ROLE, LABEL_RUN, LABEL_SCOPE, LABEL_SPEC, SANDBOX_ENV, ContainerSpec, container_name
from sandbox.workspace.run_workspace import RunWorkspace
from tests.fixtures_sandbox import ROOT, SCOPE, TEST_LIMITS, example_workspace

pytestmark = [pytest.mark.docker]

LIMITS = SandboxLimits(memory="300m", cpus=0.5, pids_limit=50)
FILL_SECONDS = 120


def spec_of(limits: SandboxLimits = LIMITS) -> ContainerSpec:
    return ContainerSpec.from_limits(limits, settings.SANDBOX_IMAGE)


def new_run() -> str:
    return str(uuid.uuid4())


def filled(pool: ContainerPool, spec: ContainerSpec, count: int = 2) -> list[str]:
    """Wait until the pool holds ``count`` idle containers for ``spec``; their ids."""
    until = time.monotonic() + FILL_SECONDS
    while len(pool.idle(SCOPE, spec)) < count:
        assert time.monotonic() < until, "the pool did not fill"
        time.sleep(0.05)
    return [slot.container_id for slot in pool.idle(SCOPE, spec)]


@pytest.fixture
def pool(docker_engine: docker.DockerClient, tmp_path: Path) -> Iterator[ContainerPool]:
    made = ContainerPool(tmp_path, 2)
    yield made
    made.close()


def take(pool: ContainerPool, run_id: str, workspace: RunWorkspace, spec: ContainerSpec, client: docker.DockerClient) -> SandboxContainer:
    """The run's container from the pool (the pool's first take for a spec misses and
    starts filling it)."""
    if not pool.idle(SCOPE, spec):
        assert pool.take(run_id, "main", workspace.dir, spec, SCOPE, client) is None
        filled(pool, spec)
    taken = pool.take(run_id, "main", workspace.dir, spec, SCOPE, client)
    assert taken is not None
    return SandboxContainer(
        client,
        taken.container_id,
        run_id,
        spec,
        taken.image_digest,
        SCOPE,
        proved_state=taken.state,
        first_exec_ended=taken.first_exec_ended,
    )


def run(container: SandboxContainer, *argv: str) -> tuple[int | None, str]:
    capture = OutputCapture(100_000)
    result = container.exec(list(argv), timeout_seconds=30, capture=capture)
    text = bytes(capture.head).decode()
    capture.discard()
    return result.exit_code, text


def test_it_hands_a_run_a_locked_down_container_with_its_workspace_limits_name_and_labels(
    docker_engine: docker.DockerClient, pool: ContainerPool, tmp_path: Path
) -> None:
    run_id, spec = new_run(), spec_of()
    workspace = example_workspace(tmp_path / run_id)
    before = sorted(os.listdir(workspace.dir))
    container = take(pool, run_id, workspace, spec, docker_engine)
    try:
        attrs = docker_engine.containers.get(container.id).attrs
        host, config = attrs["HostConfig"], attrs["Config"]
        assert attrs["Name"] == "/" + container_name(SCOPE, run_id, "main")
        assert host["NetworkMode"] == "none" and host["ReadonlyRootfs"] is True
        assert (
            host["CapDrop"] == ["ALL"] and host["SecurityOpt"] == ["no-new-privileges", security_option()] and host["Privileged"] is False
        )
        assert (host["Memory"], host["MemorySwap"], host["NanoCpus"], host["PidsLimit"]) == (300 * 2**20, 300 * 2**20, 500_000_000, 50)
        assert host["Tmpfs"] == {"/tmp": "rw,noexec,nosuid,nodev,size=256m"} and host["Runtime"] == "runc"
        assert [(m["Type"], m["Destination"], m["RW"]) for m in attrs["Mounts"]] == [("bind", "/workspace", False)]
        assert config["User"] == "65534:65534" and config["WorkingDir"] == "/workspace"
        assert not [e for e in config["Env"] if e.split("=", 1)[0] not in {"PATH", *SANDBOX_ENV}]
        labels = config["Labels"]
        assert (labels[LABEL_MANAGED], labels[LABEL_SCOPE], labels[LABEL_ROLE], labels[LABEL_SPEC]) == ("1", SCOPE, "main", spec.digest)
        assert LABEL_RUN not in labels and labels[LABEL_POOL] == str(pool.owner_dir)
        assert container.image_digest == docker_engine.images.get(settings.SANDBOX_IMAGE).id
        # The run's workspace, at its own path on the host, is what the container sees,
        # read-only; what the harness writes there afterwards reaches it too.
        assert sorted(os.listdir(workspace.dir)) == before
        code, listing = run(container, "sh", "-c", "ls -A /workspace; touch /workspace/x 2>/dev/null || echo read-only")
        assert code == 0 and listing.split() == [*before, "read-only"]
        workspace.write_file("orders/new.txt", "written after the take\n")
        assert run(container, "cat", "orders/new.txt") == (0, "written after the take\n")
        assert workspace.verify() == workspace.revision()
        # Started again (as the harness does when it cannot kill what a check left),
        # it mounts the run's workspace again: the slot's path links to it.
        assert pool.owner_dir is not None
        assert [link.resolve() for link in pool.owner_dir.iterdir() if link.is_symlink()] == [workspace.dir.resolve()]
        docker_engine.api.kill(container.id)
        until = time.monotonic() + 30
        while docker_engine.api.inspect_container(container.id)["State"]["Running"]:
            assert time.monotonic() < until
            time.sleep(0.05)
        code, listing = run(container, "ls", "-A", "/workspace")
        assert code == 0 and listing.split() == before
        # The sweep and the runs' kill find it by its run.
        assert containers_by_run(scope=SCOPE, run_id=run_id) == {run_id: [container.id]}
    finally:
        container.remove()


def test_it_gives_a_container_to_one_run_only_and_carries_nothing_between_runs(
    docker_engine: docker.DockerClient, pool: ContainerPool, tmp_path: Path
) -> None:
    spec = spec_of()
    first_run, second_run = new_run(), new_run()
    first = take(pool, first_run, example_workspace(tmp_path / first_run), spec, docker_engine)
    # The first run leaves what it can: a scratch file, and a process that outlives its
    # check (one the engine started, which no wrapper ends).
    assert run(first, "sh", "-c", "echo left > /tmp/left && cat /tmp/left") == (0, "left\n")
    detached = docker_engine.api.exec_create(first.id, ["sleep", "600"], user="65534:65534")
    docker_engine.api.exec_start(detached["Id"], detach=True)
    until = time.monotonic() + 30
    while not any("sleep" in p[-1] for p in docker_engine.api.top(first.id)["Processes"]):
        assert time.monotonic() < until
        time.sleep(0.05)
    first.remove()
    second_workspace = example_workspace(tmp_path / second_run, "examples/demo")
    filled(pool, spec)
    second = take(pool, second_run, second_workspace, spec, docker_engine)
    try:
        assert second.id != first.id
        assert first.id not in [slot.container_id for slot in pool.idle(SCOPE, spec)]
        assert run(second, "ls", "-A", "/tmp") == (0, "")
        code, processes = run(second, "ps", "-eo", "pid,args", "--no-headers")
        assert code == 0 and "sleep" not in processes and processes.split()[:3] == ["1", "python3", "/opt/harness/reaper.py"]
        code, environment = run(second, "env")
        assert code == 0 and {line.split("=", 1)[0] for line in environment.split()} <= {"PATH", "HOSTNAME", "PWD", "SHLVL", *SANDBOX_ENV}
        code, listing = run(second, "ls", "-A", "/workspace")
        assert code == 0 and sorted(listing.split()) == sorted(os.listdir(second_workspace.dir)) != sorted(
            os.listdir(tmp_path / first_run / "workspace")
        )
        # Never twice: every container the pool holds or gave is a different one.
        third_run = new_run()
        third = take(pool, third_run, example_workspace(tmp_path / third_run), spec, docker_engine)
        assert len({first.id, second.id, third.id}) == 3
        third.remove()
    finally:
        second.remove()
    # The link a taken slot's path became goes once its container is gone.
    assert pool.owner_dir is not None
    fourth_run = new_run()
    take(pool, fourth_run, example_workspace(tmp_path / fourth_run), spec, docker_engine).remove()
    filled(pool, spec)
    until = time.monotonic() + 30
    while [entry for entry in pool.owner_dir.iterdir() if entry.is_symlink()]:
        assert time.monotonic() < until, "links of removed containers were left"
        pool.want(SCOPE, spec)  # the pool's thread looks again
        time.sleep(0.2)


def test_it_leaves_a_runs_existing_container_to_be_reused(docker_engine: docker.DockerClient, pool: ContainerPool, tmp_path: Path) -> None:
    run_id, spec = new_run(), spec_of()
    workspace = example_workspace(tmp_path / run_id)
    existing = SandboxContainer.start(run_id, workspace.dir, spec, scope=SCOPE, pooled=False)
    try:
        assert pool.take(run_id, "main", workspace.dir, spec, SCOPE, docker_engine) is None
        idle = filled(pool, spec)
        # Its name is the run's: the pool's container stays nobody's, the workspace where it was.
        assert pool.take(run_id, "main", workspace.dir, spec, SCOPE, docker_engine) is None
        assert [slot.container_id for slot in pool.idle(SCOPE, spec)] == idle
        assert (workspace.dir / "orders" / "total.py").is_file()
    finally:
        existing.remove()


def pooled_containers(client: docker.DockerClient, pool: ContainerPool) -> list[str]:
    return [c.attrs["Id"] for c in client.containers.list(all=True, sparse=True, filters={"label": f"{LABEL_POOL}={pool.owner_dir}"})]


def test_it_refills_only_once_the_taken_containers_first_command_ended(
    docker_engine: docker.DockerClient, pool: ContainerPool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A container start under the run's first command would slow it down: the
    replacement is started after that command, or after the delay without one."""
    monkeypatch.setattr(pool_module, "REFILL_DELAY_SECONDS", 600)
    run_id, spec = new_run(), spec_of()
    container = take(pool, run_id, example_workspace(tmp_path / run_id), spec, docker_engine)
    try:
        time.sleep(2)  # a refill started at the take would have created its container by now
        (left,) = [slot.container_id for slot in pool.idle(SCOPE, spec)]
        assert sorted(pooled_containers(docker_engine, pool)) == sorted([container.id, left])
        assert run(container, "true") == (0, "")
        filled(pool, spec)
    finally:
        container.remove()
    monkeypatch.setattr(pool_module, "REFILL_DELAY_SECONDS", 0.1)
    idle_run = new_run()
    idle = take(pool, idle_run, example_workspace(tmp_path / idle_run), spec, docker_engine)
    try:
        filled(pool, spec)  # the delay ran out without a command
    finally:
        idle.remove()


def test_it_removes_a_killed_runs_pooled_container_at_once(docker_engine: docker.DockerClient, pool: ContainerPool, tmp_path: Path) -> None:
    run_id = new_run()
    container = take(pool, run_id, example_workspace(tmp_path / run_id), spec_of(), docker_engine)
    results = []
    check = threading.Thread(target=lambda: results.append(run(container, "sleep", "600")))
    started = time.monotonic()
    check.start()
    time.sleep(0.5)
    container.kill()
    check.join(60)
    assert not check.is_alive() and time.monotonic() - started < 60
    assert results and results[0][0] is None
    with pytest.raises(NotFound):
        docker_engine.containers.get(container.id)
    assert containers_by_run(scope=SCOPE, run_id=run_id) == {}


def test_it_is_drained_at_shutdown_and_taken_containers_stay_their_runs(
    docker_engine: docker.DockerClient, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from celery.signals import worker_shutdown

    import harness_site.celery  # noqa: F401 - connects the worker's signal handlers

    monkeypatch.setattr(pool_module, "_pool", None)
    monkeypatch.setattr(pool_module, "_settings", None)
    pool_module.configure(lambda: tmp_path, lambda: 2)
    pool = pool_module.current()
    assert pool is not None and pool_module.current() is pool
    run_id, spec = new_run(), spec_of()
    taken = take(pool, run_id, example_workspace(tmp_path / run_id), spec, docker_engine)
    idle = filled(pool, spec)
    owner_dir = pool.owner_dir
    assert owner_dir is not None and owner_dir.is_dir()
    assert containers_by_run(scope=SCOPE) == {run_id: [taken.id]}  # idle ones are nobody's while their owner lives
    worker_shutdown.send(sender=None)  # the worker's own shutdown signal drains it
    for container_id in idle:
        with pytest.raises(NotFound):
            docker_engine.containers.get(container_id)
    assert not owner_dir.exists() and pool_module._pool is None
    assert docker_engine.containers.get(taken.id).status == "running"
    taken.remove()


CHILD = """
import sys, time
from pathlib import Path
from core.policy import SandboxLimits
from sandbox.container.pool import ContainerPool
from sandbox.container.spec import ContainerSpec
pool = ContainerPool(Path(sys.argv[1]), 2)
spec = ContainerSpec.from_limits(SandboxLimits(memory="300m", cpus=0.5, pids_limit=50), sys.argv[2])
pool.take("00000000-0000-0000-0000-000000000000", "main", Path(sys.argv[1]), spec, sys.argv[3], None)
while len(pool.idle(sys.argv[3], spec)) < 2:
    time.sleep(0.05)
print(" ".join(slot.container_id for slot in pool.idle(sys.argv[3], spec)), flush=True)
time.sleep(600)
"""


def test_it_leaves_a_live_owners_pool_alone_and_sweeps_a_dead_ones(docker_engine: docker.DockerClient, tmp_path: Path) -> None:
    """A worker killed outright (no shutdown signal, no atexit) leaves its idle
    containers: the sweep removes them once the kernel has dropped the owner's lock."""
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(tmp_path), str(settings.SANDBOX_IMAGE), SCOPE],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    try:
        assert child.stdout is not None
        idle = child.stdout.readline().split()
        assert len(idle) == 2, "the child's pool did not fill"
        assert sweep_orphans([], scope=SCOPE) == []  # its owner lives: nobody's, and kept
        assert all(docker_engine.containers.get(container_id).status == "running" for container_id in idle)
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(30)
    assert sorted(containers_by_run(scope=SCOPE)[""]) == sorted(idle)
    assert sweep_orphans([], scope=SCOPE) == [""]
    for container_id in idle:
        with pytest.raises(NotFound):
            docker_engine.containers.get(container_id)
    # The next pool of the host clears the dead owner's (empty) slot directories.
    (dead_owner,) = (tmp_path / ".pool").iterdir()
    fresh = ContainerPool(tmp_path, 1)
    try:
        spec = spec_of(TEST_LIMITS)
        assert fresh.take(new_run(), "main", tmp_path, spec, SCOPE, docker_engine) is None
        filled(fresh, spec, 1)
        assert not dead_owner.exists()
    finally:
        fresh.close()
