"""A real Prometheus server (Debian's ``prometheus``) on a free loopback port, with
a generated configuration scraping the targets a test names, every second."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.fixtures_web import free_port

PROMETHEUS = "/usr/bin/prometheus"


@dataclass
class Target:
    job: str
    address: str  # host:port
    path: str = "/metrics"
    token: str = ""


class Prometheus:
    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, targets: list[Target]) -> None:
        config = self.directory / "prometheus.yml"
        # JSON is YAML: no YAML writer needed.
        config.write_text(
            json.dumps({"global": {"scrape_interval": "1s", "scrape_timeout": "900ms"}, "scrape_configs": [_job(t) for t in targets]})
        )
        log = open(self.directory / "prometheus.log", "wb")  # noqa: SIM115 - closed with the process
        self.proc = subprocess.Popen(
            [
                PROMETHEUS,
                f"--config.file={config}",
                f"--storage.tsdb.path={self.directory / 'data'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
                "--log.level=warn",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"prometheus exited with {self.proc.returncode}: {self.log()[-3000:]}")
            try:
                with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as response:
                    if response.status == 200:
                        return
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                time.sleep(0.1)
        raise RuntimeError(f"prometheus not ready after 30s: {self.log()[-3000:]}")

    def query(self, expression: str) -> float | None:
        """The value of an instant query that yields one series (or none: None)."""
        with urllib.request.urlopen(f"{self.url}/api/v1/query?{urllib.parse.urlencode({'query': expression})}", timeout=5) as response:
            body = json.load(response)
        assert body["status"] == "success", body
        result = body["data"]["result"]
        assert len(result) <= 1, f"{expression} yields {len(result)} series: {result}"
        return float(result[0]["value"][1]) if result else None

    def targets_up(self) -> dict[str, str]:
        with urllib.request.urlopen(f"{self.url}/api/v1/targets", timeout=5) as response:
            body = json.load(response)
        return {t["labels"]["job"]: t["health"] for t in body["data"]["activeTargets"]}

    def wait_for(self, expression: str, expected: float, timeout: float = 30) -> float:
        deadline = time.monotonic() + timeout
        value = None
        while time.monotonic() < deadline:
            value = self.query(expression)
            if value == expected:
                return value
            time.sleep(0.5)
        raise AssertionError(f"{expression} is {value}, not {expected}, after {timeout}s; targets {self.targets_up()}")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
        self.proc = None

    def log(self) -> str:
        return (self.directory / "prometheus.log").read_text(errors="replace")


def _job(target: Target) -> dict[str, object]:
    job: dict[str, object] = {"job_name": target.job, "metrics_path": target.path, "static_configs": [{"targets": [target.address]}]}
    if target.token:
        job["authorization"] = {"type": "Bearer", "credentials": target.token}
    return job


@pytest.fixture
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Prometheus]:
    """A Prometheus server for one test, not started: the test names its targets."""
    server = Prometheus(tmp_path_factory.mktemp("prometheus"))
    try:
        yield server
    finally:
        server.stop()
