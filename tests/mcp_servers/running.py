"""The tracker MCP server (tests/mcp_servers/tracker.py) as a process a test starts
on a free loopback port and stops, with its fault modes switched by files."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

SCRIPT = Path(__file__).with_name("tracker.py")
# The server's bearer token: in the worker's environment only (TRACKER_TOKEN_ENV).
TOKEN = "tracker-token-5f1c9e2a7b"
TOKEN_ENV = "HARNESS_TEST_TRACKER_TOKEN"


class Tracker:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.port = 0
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    def fault(self, name: str, on: bool = True) -> None:
        path = self.root / name
        if on:
            path.write_text("")
        else:
            path.unlink(missing_ok=True)

    def issues(self) -> list[dict[str, object]]:
        state = self.root / "state.json"
        return json.loads(state.read_text()) if state.exists() else []

    def start(self) -> None:
        port_file = self.root / "port"
        port_file.unlink(missing_ok=True)
        env = {**os.environ, "TRACKER_TOKEN": TOKEN}
        self._process = subprocess.Popen([sys.executable, str(SCRIPT), str(self.root / "state.json"), str(port_file)], env=env)
        deadline = time.monotonic() + 60
        while not port_file.exists() or not port_file.read_text():
            assert self._process.poll() is None, "the tracker MCP server exited"
            assert time.monotonic() < deadline, "the tracker MCP server did not start in 60s"
            time.sleep(0.05)
        self.port = int(port_file.read_text())

    def stop(self) -> None:
        if self._process is not None:
            self._process.terminate()
            try:
                self._process.wait(10)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait(10)
            self._process = None

    def restart(self) -> None:
        self.stop()
        self.start()


@contextmanager
def tracker(root: Path) -> Iterator[Tracker]:
    root.mkdir(parents=True, exist_ok=True)
    server = Tracker(root)
    server.start()
    try:
        yield server
    finally:
        server.stop()
