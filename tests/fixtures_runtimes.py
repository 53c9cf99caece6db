"""The sandbox under each container runtime: runc, and gVisor's runsc.

``runtime_engine`` is parametrised over both, so a test module that uses it runs
once per runtime. runsc needs an engine that has it registered: the main engine
when ``scripts/start_docker.sh`` started it (it registers runsc), otherwise a
private engine this fixture starts for the session beside the main one (its own
data root, exec root, pid file and socket; bridge networking off, as the sandbox
never uses it), with the sandbox image copied into it. The main engine is never
restarted or reconfigured."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import docker
import pytest
from django.conf import settings
from django.test import override_settings
from docker.errors import DockerException, ImageNotFound

from core.policy import SandboxLimits
from sandbox.container.client import docker_host, new_client
from sandbox.container.orphans import sweep_orphans
from sandbox.container.spec import RUNSC_CONFIG

RUNTIMES = ("runc", "runsc")
ENGINE_START_SECONDS = 60


@dataclass(frozen=True)
class RuntimeEngine:
    runtime: str
    host: str
    client: docker.DockerClient

    def limits(self, base: SandboxLimits) -> SandboxLimits:
        return base.model_copy(update={"runtime": self.runtime})


def _has_runtime(client: docker.DockerClient, runtime: str) -> bool:
    return runtime in (client.info().get("Runtimes") or {})


def _start_private_engine(root: Path) -> tuple[subprocess.Popen[bytes], str]:
    if shutil.which("runsc") is None:
        pytest.fail("gVisor's runsc is not installed (apt-get install runsc; .ci/run installs it)")
    if shutil.which("dockerd") is None or os.geteuid() != 0:
        pytest.fail("the main engine has no runsc runtime, and a private engine needs dockerd and root")
    config = json.loads(RUNSC_CONFIG) | {"bridge": "none", "iptables": False, "ip6tables": False}
    (root / "daemon.json").write_text(json.dumps(config))
    host = f"unix://{root}/docker.sock"
    log = open(root / "dockerd.log", "wb")  # noqa: SIM115 - the engine writes to it for the session
    process = subprocess.Popen(
        [
            "dockerd",
            "--config-file",
            str(root / "daemon.json"),
            "--data-root",
            str(root / "data"),
            "--exec-root",
            str(root / "exec"),
            "--pidfile",
            str(root / "docker.pid"),
            "-H",
            host,
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    deadline = time.monotonic() + ENGINE_START_SECONDS
    while time.monotonic() < deadline:
        try:
            docker.DockerClient(base_url=host, timeout=5).ping()
            return process, host
        except DockerException:
            if process.poll() is not None:
                break
            time.sleep(0.5)
    process.kill()
    tail = (root / "dockerd.log").read_text(errors="replace")[-2000:]
    pytest.fail(f"the private runsc engine did not start:\n{tail}")


def _copy_image(image: str, host: str) -> None:
    """``docker save | docker load``: the very image the main engine has."""
    env = {**os.environ, "DOCKER_HOST": docker_host()}
    save = subprocess.Popen(["docker", "save", image], stdout=subprocess.PIPE, env=env)
    load = subprocess.run(["docker", "load", "-q"], stdin=save.stdout, capture_output=True, env={**env, "DOCKER_HOST": host})
    assert save.stdout is not None
    save.stdout.close()
    if save.wait() != 0 or load.returncode != 0:
        pytest.fail(f"could not copy {image} into the runsc engine: {load.stderr.decode(errors='replace')}")


@pytest.fixture(scope="session")
def runsc_host(docker_engine: docker.DockerClient) -> Iterator[str]:
    if _has_runtime(docker_engine, "runsc"):
        yield docker_host()
        return
    # Short: a unix socket's path is limited to 108 bytes.
    root = Path(tempfile.mkdtemp(prefix="harness-runsc-"))
    process, host = _start_private_engine(root)
    try:
        client = docker.DockerClient(base_url=host, timeout=120)
        wanted = docker_engine.images.get(settings.SANDBOX_IMAGE).id
        try:
            present = client.images.get(settings.SANDBOX_IMAGE).id == wanted
        except ImageNotFound:
            present = False
        if not present:
            _copy_image(settings.SANDBOX_IMAGE, host)
        yield host
    finally:
        os.killpg(process.pid, signal.SIGTERM)  # the engine this fixture started, and its containerd
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="module", params=RUNTIMES)
def runtime_engine(request: pytest.FixtureRequest, docker_engine: docker.DockerClient) -> Iterator[RuntimeEngine]:
    """The engine for one runtime; for runsc on a private engine, the product's own
    client factories point at it (``settings.DOCKER_HOST``) while the module runs."""
    runtime: str = request.param
    if runtime == "runc":
        yield RuntimeEngine(runtime, docker_host(), docker_engine)
        return
    host: str = request.getfixturevalue("runsc_host")
    with override_settings(DOCKER_HOST=host):
        client = new_client()
        yield RuntimeEngine(runtime, host, client)
        from tests.fixtures_sandbox import SCOPE

        sweep_orphans([], scope=SCOPE, client=client)
