"""Real processes for tests: Celery workers (with the beat embedded) against the
local Redis and the test database. They share the test session's queue and
directories (see harness_site/test_settings.py)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.conf import settings
from django.db import connection

ROOT = Path(__file__).resolve().parent.parent


def database_url() -> str:
    """The URL of the database the test session is using right now."""
    db = connection.settings_dict
    if connection.vendor == "sqlite":
        return f"sqlite:///{db['NAME']}"
    user = db.get("USER") or "postgres"
    host = db.get("HOST") or "127.0.0.1"
    port = db.get("PORT") or 5432
    return f"postgres://{user}@{host}:{port}/{db['NAME']}"


def service_env(**extra: str) -> dict[str, str]:
    return {
        **os.environ,
        "DEBUG": "1",
        "DJANGO_SETTINGS_MODULE": "harness_site.settings",
        "DATABASE_URL": database_url(),
        "HARNESS_QUEUE": os.environ["HARNESS_QUEUE"],
        "HARNESS_VAR_DIR": str(settings.VAR_DIR),
        "HARNESS_LEASE_SECONDS": "4",
        "HARNESS_BEAT_SWEEP_SECONDS": "1",
        "HARNESS_BEAT_EXPIRE_SECONDS": "1",
        "HARNESS_VISIBILITY_TIMEOUT": "30",
        "PYTHONUNBUFFERED": "1",
        **extra,
    }


class Worker:
    """A real ``celery worker`` process (beat embedded) that tests can kill. Like the
    process supervisor of a deployment (compose's restart policy), it starts the
    worker again when it exits on its own, e.g. on an unrecoverable broker error."""

    def __init__(self, log_dir: Path, concurrency: int = 2, env: dict[str, str] | None = None) -> None:
        self.log_dir = log_dir
        self.concurrency = concurrency
        # Server configuration of this worker's own (e.g. the remotes it may push to).
        self.env = env or {}
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0
        self.restarts = 0
        self._wanted = False
        self._closed = threading.Event()
        self._lock = threading.Lock()
        self._supervisor = threading.Thread(target=self._supervise, daemon=True)

    def start(self) -> None:
        with self._lock:
            self._spawn()
            self._wanted = True
        if not self._supervisor.is_alive():
            self._supervisor.start()

    def _supervise(self) -> None:
        while not self._closed.wait(0.2):
            with self._lock:
                if self._wanted and self.proc is not None and self.proc.poll() is not None:
                    self.restarts += 1
                    self._spawn()

    def _spawn(self) -> None:
        self.starts += 1
        log = open(self.log_dir / f"worker-{self.starts}.log", "wb")  # noqa: SIM115 - closed with the process
        schedule = self.log_dir / "beat-schedule"
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "celery",
                "-A",
                "harness_site",
                "worker",
                "-Q",
                os.environ["HARNESS_QUEUE"],
                "-c",
                str(self.concurrency),
                "-B",
                "-s",
                str(schedule),
                "--without-gossip",
                "--without-mingle",
                "--without-heartbeat",
                "-l",
                "info",
                "-n",
                f"test{self.starts}@%h",
            ],
            cwd=ROOT,
            env=service_env(**self.env),
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group, so a kill takes its children too
        )
        self._wait_ready(log.name)

    def _wait_ready(self, log_path: str) -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(f"worker exited with {self.proc.returncode}: {Path(log_path).read_text()[-3000:]}")
            if b"ready." in Path(log_path).read_bytes():
                return
            time.sleep(0.1)
        raise RuntimeError(f"worker not ready after 60s: {Path(log_path).read_text()[-3000:]}")

    def kill(self, sig: int = signal.SIGKILL) -> None:
        with self._lock:
            self._wanted = False
            if self.proc is not None and self.proc.poll() is None:
                os.killpg(self.proc.pid, sig)
                self.proc.wait(30)
            self.proc = None

    def stop(self) -> None:
        self._closed.set()
        with self._lock:
            self._wanted = False
            proc, self.proc = self.proc, None
        if proc is not None and proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(30)

    def log(self) -> str:
        return "\n".join(p.read_text(errors="replace") for p in sorted(self.log_dir.glob("worker-*.log")))


def purge_queue() -> None:
    import redis

    client = redis.Redis.from_url(settings.REDIS_URL)
    client.delete(os.environ["HARNESS_QUEUE"])


@pytest.fixture
def celery_worker(transactional_db: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Worker]:
    """A running worker for one test; the test's data is committed (transactional)."""
    purge_queue()
    worker = Worker(tmp_path_factory.mktemp("worker"))
    worker.start()
    try:
        yield worker
    finally:
        worker.stop()
        purge_queue()
