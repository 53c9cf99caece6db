"""A publish whose answer was lost, looked up on another worker that rebuilt the run's
workspace (issue 28): the pushing worker's clone named the commit as the operation's
before pushing; the rebuilt clone knows it only once it is made again from the effect
the run's log fixed (``remember_pushes``), and then finds the push applied, not
somebody else's commit."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from core.contract import WorkspaceSource
from runs.persistence.artifacts import ArtifactStorage
from runs.persistence.outbox import DatabaseOutbox
from sandbox.executor import SandboxExecutor
from sandbox.rebuild import RecordedWrite, rebuild_workspace
from sandbox.tools.context import ToolSettings
from sandbox.tools.effects import remember_pushes
from sandbox.vcs.remote import RemoteTarget
from tests.fixtures_sandbox import ROOT, fixed_call
from tests.test_git_remote import FIX, Remote, changed_run, pending, remote

__all__ = ["remote"]  # the fixture, from the module that serves the git remote


def test_it_finds_a_push_applied_from_a_rebuilt_workspace_once_it_remembers_the_fixed_commit(
    remote: Remote, tmp_path: Path, db: None
) -> None:
    url = remote.proxy.url("shop.git")
    host_a = changed_run(remote, url, tmp_path / "a")
    key = "d" * 32
    call = fixed_call(host_a, "publish", {"message": "Refuse negative prices\n\nThey made refunds."}, key)
    assert call.effect is not None
    remote.proxy.drop_push_answer = True
    lost: Any = host_a.execute(call)
    assert (lost["status"], lost["effect"]) == ("unknown", "unknown"), lost
    remote.proxy.drop_push_answer = False
    workspace = host_a.workspace
    rebuilt = rebuild_workspace(
        tmp_path / "b",
        WorkspaceSource(kind="git", url=url, ref="main"),
        str(workspace.source["commit"]),
        workspace.base_revision(),
        host_a.revision(),
        [RecordedWrite(1, "c1", "write_file", {"path": "total.py", "content": FIX}, host_a.revision())],
        ROOT,
        (ROOT,),
        remote.access(),
    ).workspace
    target = RemoteTarget(
        url=url,
        base=str(rebuilt.source["commit"]),
        branch="harness/fix-totals-1a2b3c4d",
        git_dir=rebuilt.remote_git,
        access=remote.access(),
    )
    host_b = SandboxExecutor(
        "run-1a2b3c4d", rebuilt, None, ArtifactStorage(), DatabaseOutbox(), ToolSettings(write_paths=("*",), remote=target)
    )
    forgotten = host_b.reconcile(pending(key))
    assert forgotten.conflict, "without the log's fixed commit the rebuilt clone cannot tell the push is the run's"
    assert remember_pushes(host_b.context, {key: dict(call.effect)}) == [key]
    found = host_b.reconcile(pending(key))
    assert (found.resolved, found.applied, found.authoritative, found.conflict) == (True, True, True, False), found.detail
