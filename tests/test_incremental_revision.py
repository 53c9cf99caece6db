"""The workspace revision is kept along the paths the harness writes (no walk per
call), equals a full walk after any writes, survives a worker killed mid-write (the
next worker re-verifies the whole tree), and a disagreement stops the run."""

from __future__ import annotations

import os
import signal
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from core.contract import WorkspaceSource
from core.ports import RevisionMismatch
from sandbox.executor import SandboxExecutor
from sandbox.workspace import fileops, patches
from sandbox.workspace.hashing import TreeHasher
from sandbox.workspace.preparation import prepare_workspace
from sandbox.workspace.revision import RevisionIndex
from sandbox.workspace.run_workspace import RunWorkspace
from tests.fixtures_sandbox import ROOT, count_walks, drive, make_call, sandbox_policy, step

NAMES = st.sampled_from(["orders", "a", "b", "total.py", "x.py", "y.txt"])
PATHS = st.lists(NAMES, min_size=1, max_size=4).map("/".join)
CONTENT = st.text(alphabet="ab\n", max_size=30)
OPERATIONS = st.lists(st.tuples(st.sampled_from(["write", "patch", "delete"]), PATHS, CONTENT), min_size=1, max_size=12)


def prepared(root: Path) -> RunWorkspace:
    return prepare_workspace(root, WorkspaceSource(kind="path", path="examples/orders"), ROOT, (ROOT,))


def files_under(root: Path) -> dict[str, bytes]:
    out = {}
    for dirpath, _dirs, names in os.walk(root):
        for name in names:
            full = Path(dirpath) / name
            out[str(full.relative_to(root))] = full.read_bytes()
    return out


def crash_inside_write(ws: RunWorkspace, path: str, text: str, *, write: bool) -> None:
    """A worker killed (SIGKILL) after it recorded the write's intent, after the write
    itself when ``write``, before the index caught up."""
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child never returns
        try:
            with ws.index.writing([path]):
                if write:
                    fileops.write_file(ws.dir, path, text)
                os.kill(os.getpid(), signal.SIGKILL)
        finally:
            os._exit(1)
    _, status = os.waitpid(pid, 0)
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL


@pytest.mark.parametrize("staging", [False, True], ids=["in place", "in its staging directory"])
@hypothesis_settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(operations=OPERATIONS)
def test_it_keeps_the_incremental_revision_equal_to_a_full_walk(staging: bool, operations: list[tuple[str, str, str]]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        ws = prepared(Path(tmp) / "run")
        ws = RunWorkspace(ws.root, staging=True) if staging else ws
        for kind, path, text in operations:
            try:
                if kind == "write":
                    ws.write_file(path, text)
                else:
                    current = fileops.read_bytes(ws.dir, path)
                    old = None if current is None else fileops.decode(current)
                    new = None if kind == "delete" else text
                    if old is None and new is None:
                        continue
                    ws.apply_patch(patches.unified_diff(path, old, new))
            except (fileops.FileRefused, patches.PatchRefused):
                pass  # refused (a directory in the way, nothing to change): the index must still agree
            assert ws.revision() == TreeHasher().tree(ws.dir)
        # A worker that starts now trusts only what was persisted, and it verifies
        # (a staging directory is read by no other once made: its index is persisted then).
        ws.index.persist()
        restarted = RunWorkspace(ws.root)
        assert restarted.revision() == restarted.verify() == ws.revision()
        before, after = files_under(ws.pristine), files_under(ws.dir)
        assert [c.path for c in restarted.changes()] == sorted(p for p in set(before) | set(after) if before.get(p) != after.get(p))


def test_it_reads_and_writes_without_walking_the_tree(host_executor: SandboxExecutor, monkeypatch: pytest.MonkeyPatch) -> None:
    host_executor.revision()
    walks = count_walks(monkeypatch)
    before = host_executor.revision()
    read = host_executor.execute(make_call("read_file", {"path": "orders/total.py", "offset": 0, "limit": 100}))
    wrote = host_executor.execute(make_call("write_file", {"path": "orders/deep/er/new.py", "content": "N = 1\n"}))
    patch = patches.unified_diff("orders/deep/er/new.py", "N = 1\n", None)
    deleted = host_executor.execute(make_call("apply_patch", {"patch": patch}))
    assert walks == []
    assert isinstance(read, dict) and isinstance(wrote, dict) and isinstance(deleted, dict)
    assert read["revision"] == before != wrote["revision"]
    assert deleted["revision"] == before
    assert host_executor.workspace.verify() == before


@pytest.mark.parametrize("write", [True, False], ids=["after-the-write", "before-the-write"])
def test_it_recovers_a_worker_killed_mid_write_and_verifies_the_tree(tmp_path: Path, write: bool) -> None:
    ws = prepared(tmp_path / "run")
    before = ws.revision()
    crash_inside_write(ws, "orders/total.py", "crashed = True\n", write=write)
    assert (ws.index.dir / "pending").exists()

    verified: list[str] = []
    real = RunWorkspace(ws.root)
    monkey_verify = real.index.verify

    def spy() -> str:
        verified.append("walk")
        return monkey_verify()

    real.index.verify = spy  # type: ignore[method-assign]  # this instance's only
    after = real.revision()
    assert verified == ["walk"] and not (ws.index.dir / "pending").exists()
    assert after == TreeHasher().tree(ws.dir)
    assert (after != before) is write


def test_it_keeps_a_staging_index_s_write_under_way_in_memory_and_its_files_in_place(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A workspace being made in its staging directory (a rebuild replays the run's
    writes there) renames nothing into place, leaves no ``pending`` file and keeps its
    revision in memory until persisted, yet a write whose index update failed is never
    followed by the old revision: the next read brings the index up to date and walks
    the tree, as after a crash."""
    ws = RunWorkspace(prepared(tmp_path / "run").root, staging=True)
    before = ws.revision()
    replaced: list[str] = []
    real_replace = os.replace

    def replace(src: str, dst: str, **kw: int) -> None:
        replaced.append(str(dst))
        real_replace(src, dst, **kw)

    monkeypatch.setattr(os, "replace", replace)
    ws.write_file("orders/a.py", "A = 1\n")
    assert ws.revision() == TreeHasher().tree(ws.dir) != before
    # Two directories of one tree object: a write into one leaves the other's as it was.
    for path in ("x/same.py", "y/same.py", "x/more.py", "y/other.py"):
        ws.write_file(path, "same\n")
        assert ws.revision() == TreeHasher().tree(ws.dir)
    real_update = RevisionIndex._update
    failed: list[str] = []

    def update_once(index: RevisionIndex, paths: list[str]) -> None:
        if not failed:
            failed.append("update")
            raise OSError("the index cannot be written just now")
        real_update(index, paths)

    monkeypatch.setattr(RevisionIndex, "_update", update_once)
    walks = count_walks(monkeypatch)
    ws.write_file("orders/b.py", "B = 1\n")
    assert failed and not (ws.index.dir / "pending").exists()
    after = ws.revision()
    assert len(walks) == 1 and after == TreeHasher().tree(ws.dir)
    assert not any(str(ws.index.dir) in path for path in replaced)
    assert (ws.index.dir / "HEAD").read_text() == before
    ws.index.persist()
    assert (ws.index.dir / "HEAD").read_text() == after == RunWorkspace(ws.root).verify()


def test_it_stops_the_run_when_the_full_walk_disagrees(host_executor: SandboxExecutor) -> None:
    ws = host_executor.workspace

    def tamper_then_read(feedback: object, position: int) -> object | None:
        if position == 0:
            # Changed behind the harness's tools while a worker died mid-write: the
            # next worker's verification finds the other change.
            (ws.dir / "orders" / "total.py").write_text("tampered = True\n")
            crash_inside_write(ws, "orders/new.py", "N = 1\n", write=True)
            return step("read_file", path="orders/new.py")
        return None

    outcome = drive(host_executor, sandbox_policy(), tamper_then_read)
    assert outcome.state.stop_reason == "revision_mismatch"
    assert "differs from a full walk" in (outcome.state.stop_message or "")
    assert not outcome.receipts("read_file")
    with pytest.raises(RevisionMismatch):  # and it stays stopped for the next worker too
        RunWorkspace(ws.root).revision()


def test_it_walks_nothing_after_a_check_and_the_next_verification_finds_a_change_behind_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A check sees the workspace through a mount its container proved read-only, so
    nothing is walked after it; a change made meanwhile around the harness's tools
    (here by the test, as a host process would) is found by the next full walk, the
    one a pickup, a publish or a finish makes, and the run stops for good."""
    ws = prepared(tmp_path / "run")
    walks = count_walks(monkeypatch)
    with ws.untrusted_code():
        pass
    with ws.untrusted_code():
        (ws.dir / "orders" / "total.py").write_text("changed behind the harness\n")
    assert walks == [] and ws.revision() == ws.base_revision()
    with pytest.raises(RevisionMismatch, match="differs from a full walk"):
        ws.verify()
    with pytest.raises(RevisionMismatch):
        ws.revision()


def test_it_walks_the_tree_after_a_worker_killed_mid_check(tmp_path: Path) -> None:
    ws = prepared(tmp_path / "run")
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child never returns
        try:
            with ws.untrusted_code():
                (ws.dir / "orders" / "total.py").write_text("changed while the worker died\n")
                os.kill(os.getpid(), signal.SIGKILL)
        finally:
            os._exit(1)
    _, status = os.waitpid(pid, 0)
    assert os.WIFSIGNALED(status) and (ws.index.dir / "pending").read_text() == '["*"]'
    with pytest.raises(RevisionMismatch, match="differs from a full walk"):
        RunWorkspace(ws.root).revision()


def test_it_keeps_the_workspace_size_for_the_quota_without_a_walk(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ws = prepared(tmp_path / "run")
    walker = TreeHasher()
    walker.tree(ws.dir)
    assert ws.index.usage() == walker.allocated > 0
    walks = count_walks(monkeypatch)
    ws.write_file("orders/big.py", "#" * (3 << 20))
    grown = ws.index.usage()
    assert 3 << 20 <= grown - walker.allocated <= (3 << 20) + 8192
    ws.apply_patch(patches.unified_diff("orders/big.py", "#" * (3 << 20), None))
    assert ws.index.usage() == walker.allocated and walks == []
    ws.write_file("orders/new/deeper.py", "x = 1\n")  # its new directory is counted by the next walk
    kept = ws.index.usage()
    ws.verify()
    walker.tree(ws.dir)
    assert kept < ws.index.usage() == walker.allocated


def test_it_stops_when_a_tree_object_of_the_index_is_damaged(tmp_path: Path) -> None:
    ws = prepared(tmp_path / "run")
    for tree in ws.index.objects.iterdir():
        tree.write_bytes(b"damaged")
    with pytest.raises(RevisionMismatch, match="lost or damaged"):
        ws.write_file("orders/total.py", "x = 1\n")
    with pytest.raises(RevisionMismatch):
        ws.revision()
