"""Two worker hosts on this machine, with real parts: each a Celery worker process with
its own name (HARNESS_WORKER_HOST), its own data directory and its own Docker engine.
Host A's engine is a dockerd the tests start (its own data root, exec root, pid file
and socket, no bridge or iptables; the sandbox image copied in with ``docker save |
docker load``), so it can be stopped as a dead host's would be; host B uses the
machine's engine. Both share one PostgreSQL and one Redis, as hosts of an
installation do, and nothing else: no directory is shared."""

from __future__ import annotations

import shutil
import signal
import subprocess
import time
from pathlib import Path

import docker
from django.conf import settings
from docker.errors import DockerException

from sandbox.container.orphans import sweep_orphans
from tests.fixtures_services import Worker

ENGINE_START_SECONDS = 60


class Engine:
    """A dockerd of the test's own, which it starts and stops."""

    def __init__(self, root: Path, data_root: Path) -> None:
        self.root = root
        self.data_root = data_root
        self.host = f"unix://{root / 'docker.sock'}"
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0

    def start(self) -> None:
        self.starts += 1
        log = open(self.root / f"dockerd-{self.starts}.log", "wb")  # noqa: SIM115 - closed with the process
        self.proc = subprocess.Popen(
            [
                "dockerd",
                "--data-root",
                str(self.data_root),
                "--exec-root",
                str(self.root / "exec"),
                "--pidfile",
                str(self.root / "dockerd.pid"),
                "-H",
                self.host,
                "--iptables=false",
                "--ip6tables=false",
                "--bridge=none",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        deadline = time.monotonic() + ENGINE_START_SECONDS
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"dockerd exited: {Path(log.name).read_text()[-3000:]}")
            if self.up():
                return
            time.sleep(0.2)
        raise RuntimeError(f"dockerd not ready after {ENGINE_START_SECONDS} s: {Path(log.name).read_text()[-3000:]}")

    def load_sandbox_image(self) -> None:
        """The sandbox image, byte for byte the one the machine's engine has."""
        save = subprocess.Popen(["docker", "save", settings.SANDBOX_IMAGE], stdout=subprocess.PIPE)
        subprocess.run(["docker", "-H", self.host, "load", "-q"], stdin=save.stdout, check=True, capture_output=True)
        assert save.wait() == 0

    def stop(self) -> None:
        """SIGTERM, as a host shutting down stops its engine (and its containers)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(30)
        self.proc = None

    def up(self) -> bool:
        try:
            client = docker.DockerClient(base_url=self.host, timeout=3)
        except DockerException:
            return False
        try:
            return bool(client.ping())
        except DockerException:
            return False
        finally:
            client.close()

    def remove(self, scope: str) -> None:
        """Whatever the tests left on it, then the engine and its directories."""
        if self.up():
            client = docker.DockerClient(base_url=self.host, timeout=30)
            try:
                sweep_orphans([], scope=scope, client=client)
            finally:
                client.close()
        self.stop()
        shutil.rmtree(self.data_root, ignore_errors=True)
        shutil.rmtree(self.root, ignore_errors=True)


class Host:
    """One worker host: a Celery worker (beat embedded) named ``name``, with a data
    directory of its own and, if given, its own engine."""

    def __init__(self, name: str, root: Path, engine: Engine | None = None, **settings: str) -> None:
        self.name = name
        self.engine = engine
        self.data = root / "data"
        logs = root / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        env = {
            "HARNESS_WORKER_HOST": name,
            "HARNESS_VAR_DIR": str(self.data),
            "HARNESS_WORKSPACE_ROOT": str(self.data / "workspaces"),
            "HARNESS_SPOOL_DIR": str(self.data / "spool"),
            **settings,
        }
        if engine is not None:
            env["DOCKER_HOST"] = engine.host
        self.worker = Worker(logs, concurrency=2, env=env)

    def workspace(self, run_id: str) -> Path:
        return self.data / "workspaces" / run_id

    def start(self) -> None:
        """Up, if it is not: a second worker process would be a second, orphaned host."""
        if self.engine is not None and not self.engine.up():
            self.engine.start()
        if self.worker.proc is None or self.worker.proc.poll() is not None:
            self.worker.start()

    def die(self) -> float:
        """SIGKILL the worker (and its children), then stop the engine: the host is gone.
        Returns when it was killed."""
        killed = time.time()
        self.worker.kill(signal.SIGKILL)
        if self.engine is not None:
            self.engine.stop()
        return killed

    def log(self) -> str:
        return self.worker.log()
