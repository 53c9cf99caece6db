"""Whole runs against a git remote, driven by a real Celery worker: the demo task on
a bare repository of examples/orders served by ``git http-backend`` behind the
fault proxy (tests/gitserver.py), the worker configured like a deployment through
its environment (HARNESS_GIT_*, HARNESS_FORGE_*)."""

from __future__ import annotations

import copy
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.fixtures_services import Worker, purge_queue
from tests.gitserver import TOKEN, USER, FaultProxy, GitHttpServer, make_orders_remote, serving, sh
from tests.runs_waiting import DEMO_CONTRACT, DEMO_SCRIPT

REPOSITORY = "acme/orders"
CHANGE_REQUEST = {
    "tool": "open_change_request",
    "args": {"title": "Reject negative quantities", "body": "Found by the tests.\n<b>bold?</b>"},
}


@dataclass
class RemoteRig:
    root: Path
    bare: Path
    server: GitHttpServer
    proxy: FaultProxy
    worker: Worker

    @property
    def url(self) -> str:
        """The remote as runs name it: through the proxy, so faults can be injected."""
        return self.proxy.url(f"{REPOSITORY}.git")

    def contract(self, *extra_tools: str) -> dict[str, Any]:
        contract: dict[str, Any] = copy.deepcopy(DEMO_CONTRACT)
        contract["workspace"] = {"kind": "git", "url": self.url, "ref": "main"}
        contract["allowed_tools"] += list(extra_tools)
        return contract

    def branch_of(self, run: Any) -> str:
        return f"harness/{run.task_id}-{str(run.pk)[:8]}"

    def head(self, branch: str) -> str | None:
        listed = sh("for-each-ref", "--format=%(objectname)", f"refs/heads/{branch}", cwd=self.bare)
        return listed or None

    def updates(self, branch: str) -> int:
        """How many times the branch moved on the server (its reflog)."""
        log = self.bare / "logs" / "refs" / "heads" / branch
        return len(log.read_text().splitlines()) if log.exists() else 0

    def lookups(self) -> int:
        """ls-remote (and clone) requests that went through the proxy."""
        return sum(1 for path in self.proxy.seen if path.endswith("/info/refs?service=git-upload-pack"))


def parked(run: Any, timeout: float = 60) -> Any:
    """The run once the worker that parked it for approval has released its lease.
    A grant made before that is answered by a resume that finds the run leased and
    gives up, and nothing resumes the run later (a race of the product's, reported
    to the lead; these tests are about remotes, so they grant after the release)."""
    deadline = time.monotonic() + timeout
    while True:
        run.refresh_from_db()
        if run.status == "waiting_approval" and not run.lease_owner:
            return run
        assert time.monotonic() < deadline, f"run {run.pk} still leased by {run.lease_owner!r} ({run.status})"
        time.sleep(0.05)


def demo_script(*extra: dict[str, Any]) -> dict[str, Any]:
    """The demo's proposals with ``extra`` calls before its finish."""
    return {"kind": "scripted", "script": [*DEMO_SCRIPT[:-1], *extra, DEMO_SCRIPT[-1]]}


@contextmanager
def remote_rig(root: Path, settings: Any, **worker_env: str) -> Iterator[RemoteRig]:
    """The server, its proxy and a worker allowed to clone and push there. The web
    side (this process) checks the remote against the same allowed list."""
    root.mkdir(parents=True, exist_ok=True)
    bare = make_orders_remote(root, f"{REPOSITORY}.git")
    server = GitHttpServer(root)
    proxy = FaultProxy(server)
    allowed = f"http://127.0.0.1:{proxy.port}/acme/"
    settings.GIT_ALLOWED_REMOTES = [allowed]
    env = {
        "HARNESS_GIT_ALLOWED_REMOTES": allowed,
        "HARNESS_GIT_TOKEN": TOKEN,
        "HARNESS_GIT_TOKEN_USER": USER,
        "HARNESS_GIT_TIMEOUT_SECONDS": "30",
        **worker_env,
    }
    with serving(server, proxy):
        purge_queue()
        worker = Worker(root / "worker-logs", env=env)
        (root / "worker-logs").mkdir()
        worker.start()
        try:
            yield RemoteRig(root, bare, server, proxy, worker)
        finally:
            worker.stop()
            purge_queue()
