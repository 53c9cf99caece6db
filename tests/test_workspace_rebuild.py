"""A run's workspace rebuilt from its record alone (sandbox/rebuild.py): the source
at its base revision plus the writes the log records as applied, replayed through
the workspace's own writers and verified at the run's revision; a source that
changed or cannot be read, or a write that cannot be replayed exactly, refuses the
rebuild saying why."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import docker
import pytest
from django.contrib.auth.models import User
from pytest_django import Settings

from approvals.models import ApprovalRequest
from core.contract import WorkspaceSource
from core.events import ReceiptRecorded
from core.ports import RevisionMismatch
from runs.approval_flow.flow import grant
from runs.models import Run
from runs.persistence.artifacts import ArtifactStorage
from runs.persistence.outbox import DatabaseOutbox
from runs.runtime import advance, create_run, workspace_root
from sandbox.executor import SandboxExecutor
from sandbox.rebuild import RebuildFailed, RecordedWrite, rebuild_workspace, recorded_writes
from sandbox.tools.context import ToolSettings
from sandbox.workspace.preparation import prepare_workspace
from sandbox.workspace.run_workspace import RunWorkspace
from tests.fixtures_sandbox import WRITE_PATHS, Outcome, drive, sandbox_policy, step
from tests.runs_waiting import DEMO_CONTRACT, SCRIPTED_DEMO

ROOT = Path(__file__).resolve().parent.parent
PATCH = json.loads((ROOT / "examples/demo/proposals.json").read_text())[1]["args"]["patch"]

SCRIPT = [
    step("write_file", path="orders/notes.txt", content="first\n"),
    step("apply_patch", patch=PATCH),
    step("apply_patch", patch="--- a/orders/none.py\n+++ b/orders/none.py\n@@ -1 +1 @@\n-x\n+y\n"),  # refused: no effect
    step("write_file", path="orders/notes.txt", content="second\n"),
    step("write_file", path="orders/notes.txt", content="second\n"),  # unchanged: no effect
]


def driven(tmp_path: Path, source: WorkspaceSource) -> tuple[Outcome, RunWorkspace]:
    workspace = prepare_workspace(tmp_path / "host-a", source, ROOT, (tmp_path, ROOT))
    executor = SandboxExecutor("rebuild", workspace, None, ArtifactStorage(), DatabaseOutbox(), ToolSettings(write_paths=WRITE_PATHS))
    return drive(executor, sandbox_policy(), SCRIPT), workspace


def rebuild(
    tmp_path: Path, source: WorkspaceSource, outcome: Outcome, writes: list[RecordedWrite] | None = None, **kw: Any
) -> RunWorkspace:
    state = outcome.state
    return rebuild_workspace(
        tmp_path / "host-b",
        source,
        kw.get("commit"),
        state.base_revision,
        state.revision,
        recorded_writes(outcome.events) if writes is None else writes,  # type: ignore[arg-type]
        ROOT,
        (tmp_path, ROOT),
        mask="[redacted]",
    ).workspace


def files(workspace: RunWorkspace) -> dict[str, bytes]:
    return {str(p.relative_to(workspace.dir)): p.read_bytes() for p in sorted(workspace.dir.rglob("*")) if p.is_file()}


@pytest.fixture
def source(tmp_path: Path) -> WorkspaceSource:
    shutil.copytree(ROOT / "examples/orders", tmp_path / "orders-src")
    return WorkspaceSource(kind="path", path=str(tmp_path / "orders-src"))


def test_it_rebuilds_the_workspace_from_the_source_and_the_recorded_writes(db: None, tmp_path: Path, source: WorkspaceSource) -> None:
    outcome, original = driven(tmp_path, source)
    writes = recorded_writes(outcome.events)  # type: ignore[arg-type]
    assert [w.tool for w in writes] == ["write_file", "apply_patch", "write_file"]  # neither the refused nor the unchanged one
    assert outcome.state.revision != outcome.state.base_revision
    rebuilt = rebuild(tmp_path, source, outcome)
    assert rebuilt.verify() == outcome.state.revision
    assert files(rebuilt) == files(original)
    assert rebuilt.base_revision() == outcome.state.base_revision  # the reviewer's diff is against the same base
    assert rebuilt.diff().text == original.diff().text


def test_it_refuses_a_source_that_changed_or_is_gone(db: None, tmp_path: Path, source: WorkspaceSource) -> None:
    outcome, _ = driven(tmp_path, source)
    assert source.path is not None
    (Path(source.path) / "orders" / "total.py").write_text("changed behind the run's back\n")
    with pytest.raises(RebuildFailed, match="changed since the run started"):
        rebuild(tmp_path, source, outcome)
    assert not (tmp_path / "host-b").exists()  # nothing half-made is left looking ready
    shutil.rmtree(source.path)
    with pytest.raises(RebuildFailed, match="cannot be read"):
        rebuild(tmp_path, source, outcome)


def test_it_refuses_a_write_that_does_not_give_the_recorded_revision(db: None, tmp_path: Path, source: WorkspaceSource) -> None:
    outcome, _ = driven(tmp_path, source)
    writes = recorded_writes(outcome.events)  # type: ignore[arg-type]
    masked = RecordedWrite(
        writes[0].seq, writes[0].call_id, "write_file", {"path": "orders/notes.txt", "content": "[redacted]\n"}, writes[0].revision
    )
    with pytest.raises(RebuildFailed, match="stored with a secret masked"):
        rebuild(tmp_path, source, outcome, [masked, *writes[1:]])
    with pytest.raises(RebuildFailed, match="the run's record says"):
        rebuild(tmp_path, source, outcome, writes[:1])  # a write missing from the record


def test_it_refuses_a_log_that_records_a_change_around_the_tools(db: None, tmp_path: Path, source: WorkspaceSource) -> None:
    from core.events import WorkspaceChanged

    outcome, _ = driven(tmp_path, source)
    changed = WorkspaceChanged(run_id="rebuild", seq=99, ts=0.0, old_revision="a" * 40, revision="b" * 40)
    with pytest.raises(RebuildFailed, match="came around the harness's tools"):
        recorded_writes([*outcome.events, changed])  # type: ignore[list-item]


def git(*args: str, cwd: Path) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


def test_it_rebuilds_a_git_source_at_its_commit_after_the_branch_moved_and_not_once_the_commit_is_gone(db: None, tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    shutil.copytree(ROOT / "examples/orders", repo)
    git("init", "-q", "-b", "main", cwd=repo)
    git("add", "-A", cwd=repo)
    git("-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-qm", "base", cwd=repo)
    source = WorkspaceSource(kind="git", path=str(repo), ref="main")
    outcome, original = driven(tmp_path, source)
    commit = str(original.source["commit"])
    (repo / "orders" / "total.py").write_text("moved on\n")
    git("-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-qam", "moved", cwd=repo)
    rebuilt = rebuild(tmp_path, source, outcome, commit=commit)
    assert rebuilt.verify() == outcome.state.revision and rebuilt.source["commit"] == commit
    assert files(rebuilt) == files(original)
    # Force-moved and collected: the commit the run started from is gone.
    git("reset", "-q", "--hard", "HEAD~1", cwd=repo)
    git("-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-q", "--amend", "-m", "rewritten", cwd=repo)
    git("reflog", "expire", "--expire=now", "--all", cwd=repo)
    git("gc", "-q", "--prune=now", cwd=repo)
    with pytest.raises(RebuildFailed, match="cannot be read"):
        rebuild(tmp_path, source, outcome, commit=commit)


def read_calls() -> int:
    """This process's read system calls so far (``syscr``: a file read is at least one)."""
    return next(int(line.split()[1]) for line in Path("/proc/self/io").read_text().splitlines() if line.startswith("syscr:"))


def test_it_takes_the_rebuilt_tree_from_its_proofs_without_walking_it_and_the_walk_before_publish_still_judges_it(
    db: None, tmp_path: Path
) -> None:
    """The rebuilt tree is the run's by what was proven as it was made (the commit's own
    trees, each replayed write hashed and matched to the log), not by reading back its
    500 files; a change that came around the tools after it is found by the full walk
    that runs before publish and before the run completes."""
    repo = tmp_path / "repo"
    shutil.copytree(ROOT / "examples/orders", repo)
    for n in range(500):
        (repo / "many" / f"d{n // 50}").mkdir(parents=True, exist_ok=True)
        (repo / "many" / f"d{n // 50}" / f"f{n}.txt").write_text(f"{n}\n")
    git("init", "-q", "-b", "main", cwd=repo)
    git("add", "-A", cwd=repo)
    git("-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-qm", "base", cwd=repo)
    source = WorkspaceSource(kind="git", path=str(repo), ref="main")
    outcome, original = driven(tmp_path, source)
    before = read_calls()
    rebuilt = rebuild(tmp_path, source, outcome, commit=str(original.source["commit"]))
    assert read_calls() - before < 500, "the rebuild read the tree back"
    assert rebuilt.picked_up() == outcome.state.revision
    assert files(rebuilt) == files(original)
    (rebuilt.dir / "many" / "d0" / "f0.txt").write_text("changed around the tools\n")
    with pytest.raises(RevisionMismatch):
        rebuilt.verify()


def test_it_keeps_only_valid_receipts_that_wrote(db: None, tmp_path: Path, source: WorkspaceSource) -> None:
    outcome, _ = driven(tmp_path, source)
    receipts = [e for e in outcome.events if isinstance(e, ReceiptRecorded)]
    wrote = [e.call_id for e in receipts if e.valid and e.wrote]
    assert [w.call_id for w in recorded_writes(outcome.events)] == wrote  # type: ignore[arg-type]


@pytest.mark.docker
@pytest.mark.django_db(transaction=True)
def test_it_stops_a_run_workspace_lost_when_its_host_is_gone_and_its_source_changed(
    operator: User, reviewer: User, docker_engine: docker.DockerClient, tmp_path: Path, settings: Settings
) -> None:
    settings.WORKSPACE_SOURCES = [*settings.WORKSPACE_SOURCES, tmp_path]
    shutil.copytree(ROOT / "examples/orders", tmp_path / "orders")
    contract = {**DEMO_CONTRACT, "workspace": {"kind": "path", "path": str(tmp_path / "orders")}}
    run = create_run(contract, SCRIPTED_DEMO, operator, enqueue=False)
    assert advance(str(run.pk)) == "waiting_approval"
    run.refresh_from_db()
    assert run.host == settings.HARNESS_WORKER_HOST and run.workspace_source and run.workspace_source["kind"] == "path"
    # Its host is gone (no heartbeat: nobody holds the run), and so is its copy; the
    # source changed since the run started.
    Run.objects.filter(pk=run.pk).update(host="a-host-that-is-gone")
    shutil.rmtree(workspace_root(run))
    (tmp_path / "orders" / "orders" / "total.py").write_text("changed after the run started\n")
    grant(ApprovalRequest.objects.get(run=run, status="pending"), reviewer)
    assert advance(str(run.pk)) == "workspace_lost"
    run.refresh_from_db()
    assert run.outcome == "workspace_lost" and "changed since the run started" in run.stop_message, run.stop_message
    assert not ApprovalRequest.objects.filter(run=run, status__in=("pending", "granted")).exists()  # nothing left to use
    assert not workspace_root(run).exists()  # nothing half-made left looking ready


@pytest.mark.docker
@pytest.mark.django_db(transaction=True)
def test_it_stops_a_killed_run_killed_when_its_workspace_cannot_be_rebuilt(
    operator: User, docker_engine: docker.DockerClient, tmp_path: Path, settings: Settings
) -> None:
    settings.WORKSPACE_SOURCES = [*settings.WORKSPACE_SOURCES, tmp_path]
    shutil.copytree(ROOT / "examples/orders", tmp_path / "orders")
    contract = {**DEMO_CONTRACT, "workspace": {"kind": "path", "path": str(tmp_path / "orders")}}
    run = create_run(contract, SCRIPTED_DEMO, operator, enqueue=False)
    assert advance(str(run.pk)) == "waiting_approval"
    Run.objects.filter(pk=run.pk).update(host="a-host-that-is-gone", kill_requested=True)
    shutil.rmtree(tmp_path / "orders")
    assert advance(str(run.pk)) == "killed"
    run.refresh_from_db()
    assert run.outcome == "killed" and "cannot be read" in run.stop_message, run.stop_message
