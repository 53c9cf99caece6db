"""The sandbox's file tools, patches, publishing and workspaces, on the worker host
(no container needed): what each tool returns, what it refuses, and that the
workspace revision is the git tree hash of the contents."""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import tarfile
import zipfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from core.contract import WorkspaceSource
from core.ports import RevisionMismatch
from core.state import PendingEffect
from runs.persistence.outbox import published_patch
from sandbox.executor import SandboxExecutor
from sandbox.tools.publishing import publication
from sandbox.workspace import fileops, patches
from sandbox.workspace.hashing import TreeHasher
from sandbox.workspace.preparation import prepare_workspace
from sandbox.workspace.run_workspace import RunWorkspace
from sandbox.workspace.sources import WorkspaceSourceError
from tests.fixtures_sandbox import ROOT, fixed_call, make_call

CACHES = {"__pycache__", ".pytest_cache", ".benchmarks", ".hypothesis"}

FIX = """--- a/orders/total.py
+++ b/orders/total.py
@@ -13,4 +13,6 @@
     subtotal = 0
     for line in lines:
+        if line["quantity"] < 0:
+            raise ValueError(f"quantity must not be negative, got {line['quantity']}")
         subtotal += line["unit_price"] * line["quantity"]
     return subtotal * (100 - discount_percent) // 100
"""


def run(executor: SandboxExecutor, tool: str, **args: Any) -> dict[str, Any]:
    defaults: dict[str, dict[str, object]] = {
        "list_files": {"path": ".", "max_entries": 500},
        "read_file": {"offset": 0, "limit": 400},
        "search": {"path": ".", "max_matches": 200},
    }
    key = args.pop("_key", None)
    full = {**defaults.get(tool, {}), **args}
    receipt = executor.execute(fixed_call(executor, tool, full, key) if key is not None else make_call(tool, full))
    assert isinstance(receipt, dict)
    assert receipt["revision"] == executor.revision()
    return receipt


def git_tree(directory: Path, tmp_path: Path) -> str:
    """git's own answer, from a fresh index each time: a kept index trusts its stat
    cache, which an edit of the same size with the old mtime fools."""
    git_dir = tmp_path / "private.git"
    (git_dir / "index").unlink(missing_ok=True)
    env = {"PATH": os.environ["PATH"], "GIT_DIR": str(git_dir), "GIT_WORK_TREE": str(directory), "HOME": str(tmp_path)}
    if not git_dir.exists():
        subprocess.run(["git", "init", "-q", "--bare", str(git_dir)], check=True, env={"PATH": env["PATH"], "HOME": env["HOME"]})
    subprocess.run(["git", "-c", "safe.directory=*", "add", "-A"], check=True, env=env, cwd=directory)
    return subprocess.run(
        ["git", "-c", "safe.directory=*", "write-tree"], check=True, env=env, capture_output=True, text=True, cwd=directory
    ).stdout.strip()


# -- reading -------------------------------------------------------------------------


def test_it_lists_reads_and_searches_the_workspace(host_executor: SandboxExecutor) -> None:
    listing = run(host_executor, "list_files")["data"]
    assert listing["files"] == ["AGENTS.md", "orders/__init__.py", "orders/total.py", "pytest.ini", "tests/test_total.py"]
    assert run(host_executor, "list_files", path="orders", max_entries=1)["data"] == {
        "path": "orders",
        "files": ["orders/__init__.py"],
        "symlinks": [],
        "truncated": True,
    }
    page = run(host_executor, "read_file", path="orders/total.py", offset=2, limit=3)["data"]
    assert page["content"] == "from __future__ import annotations\n\nfrom collections.abc import Iterable, Mapping\n"
    assert page["lines"] == 3 and page["next_offset"] == 5
    assert run(host_executor, "read_file", path="orders/total.py", offset=10, limit=400)["data"]["next_offset"] is None
    hits = run(host_executor, "search", pattern='line["quantity"]')["data"]
    assert [(m["path"], m["line"]) for m in hits["matches"]] == [("orders/total.py", 15)]
    assert run(host_executor, "search", pattern=".*", path="orders")["data"]["matches"] == []  # literal, not a regex


def test_it_shows_a_model_the_repository_instructions_files_and_writable_sources(host_executor: SandboxExecutor) -> None:
    workspace = host_executor.workspace
    tools = ["list_files", "read_file"]
    context = workspace.repository_context(["orders/*"], tools)
    assert context.instructions == (workspace.dir / "AGENTS.md").read_text()
    assert context.state is not None
    assert context.state.splitlines()[1:] == ["AGENTS.md", "orders/__init__.py", "orders/total.py", "pytest.ini", "tests/test_total.py"]
    assert [path for path, _ in context.sources] == ["orders/__init__.py", "orders/total.py"]  # not the tests: not writable
    assert dict(context.sources)["orders/total.py"] == (workspace.dir / "orders" / "total.py").read_text()

    # What the run could have planted is read the way the tools read: an instructions
    # file that is a symlink is not followed (the next one is used), binary and
    # oversized files are left out.
    (workspace.dir / "AGENTS.md").unlink()
    (workspace.dir / "AGENTS.md").symlink_to("/etc/passwd")
    (workspace.dir / "README.md").write_text("# orders\n")
    (workspace.dir / "orders" / "blob.bin").write_bytes(b"\x00" * 10)
    (workspace.dir / "orders" / "huge.py").write_text("x = 1\n" * 100_000)
    context = workspace.repository_context(["orders/*"], tools)
    assert context.instructions == "# orders\n"
    assert context.state is not None
    assert "Symlinks (the file tools do not follow them):\nAGENTS.md" in context.state
    assert [path for path, _ in context.sources] == ["orders/__init__.py", "orders/total.py"]
    assert "root:" not in repr(context)

    # Only what the run's tools could show it.
    assert workspace.repository_context(["orders/*"], ["read_file"]).state is None
    unread = workspace.repository_context(["orders/*"], ["list_files"])
    assert unread.state is not None
    assert unread.instructions is None and unread.sources == () and "orders/total.py" in unread.state


def test_it_reports_tool_problems_as_receipts_not_exceptions(host_executor: SandboxExecutor) -> None:
    missing = run(host_executor, "read_file", path="orders/nope.py")
    assert (missing["status"], missing["effect"], missing["data"]["error"]) == ("ok", "none", "orders/nope.py does not exist")
    assert run(host_executor, "read_file", path="orders")["data"]["error"] == "orders is a directory"
    assert run(host_executor, "list_files", path="nope", max_entries=5)["data"]["error"] == "nope does not exist"
    (host_executor.workspace.dir / "orders" / "blob.bin").write_bytes(b"\x00\x01binary")
    assert "binary file" in run(host_executor, "read_file", path="orders/blob.bin")["data"]["error"]
    assert run(host_executor, "write_file", path="orders", content="x")["data"]["error"].startswith("orders is a directory")


def test_it_cuts_overlong_lines_and_pages_by_bytes(host_executor: SandboxExecutor) -> None:
    (host_executor.workspace.dir / "orders" / "big.txt").write_text("a" * 100_000 + "\nshort\n" + "b\n" * 5000)
    first = host_executor.execute(make_call("read_file", {"path": "orders/big.txt", "offset": 0, "limit": 10_000}, cap=40_000))
    assert isinstance(first, dict)
    data = first["data"]
    assert data["lines"] >= 2 and data["lines_cut"] == 1 and data["content"].startswith("a" * 16_000 + " [line cut]\nshort\n")
    assert data["next_offset"] == data["lines"] and len(data["content"]) <= 20_000 + 100


# -- writing ---------------------------------------------------------------------------


def test_it_writes_files_atomically_keeping_mode_and_owner(host_executor: SandboxExecutor) -> None:
    target = host_executor.workspace.dir / "orders" / "total.py"
    target.chmod(0o755)
    receipt = run(host_executor, "write_file", path="orders/total.py", content="X = 1\n")
    assert (receipt["effect"], receipt["data"]["created"]) == ("applied", False)
    assert target.read_text() == "X = 1\n" and target.stat().st_mode & 0o777 == 0o755
    assert run(host_executor, "write_file", path="orders/total.py", content="X = 1\n")["effect"] == "none"  # unchanged
    created = run(host_executor, "write_file", path="orders/deep/er/new.py", content="Y = 2\n")
    assert created["data"]["created"] is True
    new = host_executor.workspace.dir / "orders" / "deep" / "er" / "new.py"
    if os.geteuid() == 0:  # new files and directories belong to the sandbox user, like the rest
        assert (new.stat().st_uid, new.parent.stat().st_uid) == (65534, 65534)
    assert not [p for p in (host_executor.workspace.dir / "orders").rglob("*.tmp")]


def test_it_refuses_symlinks_git_and_dotdot_on_the_host(host_executor: SandboxExecutor, tmp_path: Path) -> None:
    ws = host_executor.workspace.dir
    outside = tmp_path / "outside.txt"
    outside.write_text("secret\n")
    (ws / "orders" / "link.py").symlink_to(outside)
    (ws / "orders" / "linkdir").symlink_to(tmp_path)
    for tool, args in [
        ("read_file", {"path": "orders/link.py"}),
        ("read_file", {"path": "orders/linkdir/outside.txt"}),
        ("write_file", {"path": "orders/link.py", "content": "pwned"}),
        ("write_file", {"path": "orders/linkdir/outside.txt", "content": "pwned"}),
        ("write_file", {"path": "orders/linkdir/new.txt", "content": "pwned"}),
    ]:
        receipt = run(host_executor, tool, **args)
        assert receipt["effect"] == "none" and "is a symlink" in receipt["data"]["error"], (tool, args, receipt)
    assert outside.read_text() == "secret\n" and not (tmp_path / "new.txt").exists()
    assert run(host_executor, "write_file", path="orders/.git/config", content="x")["data"]["error"].endswith(
        ".git directories are not accessible"
    )
    for bad in ("../x", "/etc/passwd", "a/./b", "a//b"):
        with pytest.raises(fileops.FileRefused):
            fileops.split_path(bad)


def test_it_does_not_hang_on_a_fifo(host_executor: SandboxExecutor) -> None:
    # Opening a FIFO to read blocks until a writer comes, and none will: that the
    # calls return at all is the outcome.
    os.mkfifo(host_executor.workspace.dir / "orders" / "pipe")
    assert "special file" in run(host_executor, "read_file", path="orders/pipe")["data"]["error"]
    assert "pipe" not in str(run(host_executor, "search", pattern="x")["data"]["matches"])


# -- patches ---------------------------------------------------------------------------


def test_it_applies_a_patch_even_with_wrong_line_numbers(host_executor: SandboxExecutor) -> None:
    receipt = run(host_executor, "apply_patch", patch=FIX.replace("@@ -13,4 +13,6 @@", "@@ -3,4 +3,6 @@"))
    assert receipt["effect"] == "applied" and receipt["data"] == {"files": [{"path": "orders/total.py", "action": "modified"}]}
    assert 'if line["quantity"] < 0:' in (host_executor.workspace.dir / "orders" / "total.py").read_text()


def test_it_refuses_a_patch_that_does_not_apply_and_writes_nothing(host_executor: SandboxExecutor) -> None:
    before = host_executor.revision()
    two_files = (
        "--- /dev/null\n+++ b/orders/new.py\n@@ -0,0 +1 @@\n+NEW = 1\n" + FIX + "@@ -30,2 +32,2 @@\n-not in the file\n+whatever\n context\n"
    )
    receipt = run(host_executor, "apply_patch", patch=two_files)
    assert receipt["effect"] == "none" and receipt["status"] == "ok"
    error = receipt["data"]["error"]
    assert error.startswith("the patch was not applied (nothing was written): orders/total.py: hunk 2 (@@ -30,2 +32,2 @@) does not apply")
    assert "expected 'not in the file'" in error
    assert host_executor.revision() == before and not (host_executor.workspace.dir / "orders" / "new.py").exists()
    for patch, message in [
        ("--- a/orders/total.py\n+++ b/orders/total.py\n@@ -1,3 +1,3 @@\n-x\n", "ends early"),
        ("--- a/orders/a.py\n+++ b/orders/b.py\n@@ -1 +1 @@\n-x\n+y\n", "renames are not supported"),
        ("diff --git a/x b/x\nold mode 100644\nnew mode 100755\n", "mode changes are not supported"),
        ("--- a/orders/gone.py\n+++ b/orders/gone.py\n@@ -1 +1 @@\n-x\n+y\n", "orders/gone.py: the file does not exist"),
        ("--- /dev/null\n+++ b/orders/total.py\n@@ -0,0 +1 @@\n+x\n", "creates this file but it already exists"),
    ]:
        assert message in run(host_executor, "apply_patch", patch=patch)["data"]["error"], patch


def test_it_creates_and_deletes_files_by_patch(host_executor: SandboxExecutor) -> None:
    current = (host_executor.workspace.dir / "orders" / "__init__.py").read_text()
    patch = patches.unified_diff("orders/__init__.py", current, None) + patches.unified_diff("orders/extra.py", None, "A = 1")
    receipt = run(host_executor, "apply_patch", patch=patch)
    assert receipt["data"]["files"] == [
        {"path": "orders/__init__.py", "action": "deleted"},
        {"path": "orders/extra.py", "action": "created"},
    ]
    assert not (host_executor.workspace.dir / "orders" / "__init__.py").exists()
    assert (host_executor.workspace.dir / "orders" / "extra.py").read_text() == "A = 1"


lines = st.lists(st.sampled_from(["a", "b", "c", "", "  d", "x\r", "é"]), max_size=12)


@hypothesis_settings(max_examples=300, deadline=None)
@given(old=lines, new=lines, old_eol=st.booleans(), new_eol=st.booleans())
def test_it_round_trips_any_diff_through_the_applier(old: list[str], new: list[str], old_eol: bool, new_eol: bool) -> None:
    before = "\n".join(old) + ("\n" if old and old_eol else "")
    after = "\n".join(new) + ("\n" if new and new_eol else "")
    diff = patches.unified_diff("f.txt", before, after)
    if before == after:
        assert diff == ""
        return
    (file_patch,) = patches.parse_patch(diff)
    assert patches.apply_hunks(file_patch, before) == after


def test_it_previews_writes_for_reviewers(host_executor: SandboxExecutor) -> None:
    preview = host_executor.preview("apply_patch", {"patch": FIX})
    assert preview is not None and preview.startswith("diff --git a/orders/total.py b/orders/total.py\n")
    assert '+        if line["quantity"] < 0:\n' in preview
    write = host_executor.preview("write_file", {"path": "orders/new.py", "content": "A = 1\n"})
    assert (
        write
        == "diff --git a/orders/new.py b/orders/new.py\nnew file mode 100644\n--- /dev/null\n+++ b/orders/new.py\n@@ -0,0 +1,1 @@\n+A = 1\n"
    )
    assert (host_executor.preview("apply_patch", {"patch": "--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\n"}) or "").startswith(
        "# this apply_patch would be refused: x: the file does not exist"
    )
    assert host_executor.preview("read_file", {"path": "x"}) is None
    # Beside the diff, the files it changes as they are now: what a reviewer expands
    # the context around a hunk from (the new file has no old side).
    current = (host_executor.workspace.dir / "orders/total.py").read_text()
    assert host_executor.sources("apply_patch", {"patch": FIX}) == {"orders/total.py": current}
    assert host_executor.sources("write_file", {"path": "orders/total.py", "content": "A = 1\n"}) == {"orders/total.py": current}
    assert host_executor.sources("write_file", {"path": "orders/new.py", "content": "A = 1\n"}) == {}
    assert host_executor.sources("apply_patch", {"patch": "--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\n"}) == {}
    assert host_executor.sources("read_file", {"path": "x"}) == {}


# -- publishing --------------------------------------------------------------------------


def test_it_publishes_the_diff_once_per_idempotency_key(host_executor: SandboxExecutor, tmp_path: Path) -> None:
    base = (host_executor.workspace.dir / "orders/total.py").read_text()
    run(host_executor, "apply_patch", patch=FIX)
    # A publish's diff is made against the base: that side is what its context expands from.
    assert host_executor.sources("publish", {"message": "m"}) == {"orders/total.py": base}
    key = "0123456789abcdef0123456789abcdef"
    first = run(host_executor, "publish", message="Reject negative quantities\n\nThey made refunds.", _key=key)
    assert first["effect"] == "applied" and first["data"]["duplicate"] is False and first["data"]["files"] == ["orders/total.py"]
    again = run(host_executor, "publish", message="Reject negative quantities", _key=key)
    assert (again["effect"], again["data"]["duplicate"]) == ("none", True)
    patch = published_patch(key)
    assert patch is not None
    text = patch.decode()
    outbox_file = tmp_path / f"{key}.patch"
    outbox_file.write_bytes(patch)
    assert text.startswith(f"# Harness publish {key}\n# run: {host_executor.run_id}\n") and "# They made refunds.\n" in text
    copy = tmp_path / "check"
    shutil.copytree(host_executor.workspace.pristine, copy)
    applied = subprocess.run(["git", "apply", "--check", "-v", str(outbox_file)], cwd=copy, capture_output=True, text=True)
    assert applied.returncode == 0, applied.stderr
    lookup = run(host_executor, "lookup_publish", idempotency_key=key)["data"]
    assert lookup == {"idempotency_key": key, "found": True, "authoritative": True}
    assert run(host_executor, "lookup_publish", idempotency_key="f" * 32)["data"]["found"] is False

    def effect(k: str) -> PendingEffect:
        return PendingEffect(call_id="c9", tool="publish", args={}, kind="external", idempotency_key=k, reason="lost", recorded_at=0)

    found = host_executor.reconcile(effect(key))
    assert (found.resolved, found.applied, found.authoritative) == (True, True, True)
    absent = host_executor.reconcile(effect("e" * 32))
    assert (absent.resolved, absent.applied, absent.authoritative) == (True, False, True)


# -- the workspace and its revision ---------------------------------------------------


class CannotWalk:
    def tree(self, *args: object) -> str:
        raise AssertionError("the maintained revision was read by walking the tree")


def test_it_keeps_the_revision_equal_to_git_and_stable(host_executor: SandboxExecutor, tmp_path: Path) -> None:
    """The full walk, which verifies the maintained revision, after edits behind the
    harness's back (which only a walk can see)."""
    ws = host_executor.workspace
    ws.index.hasher = TreeHasher(racy_ns=0)  # cache even files written a moment ago, to test the cache key
    revision = ws.reread()
    assert revision == git_tree(ws.dir, tmp_path) == ws.base_revision()
    # Maintained, not walked: with a hasher that cannot walk, the revision is still read.
    hasher, ws.index.hasher = ws.index.hasher, CannotWalk()  # type: ignore[assignment]
    assert all(ws.revision() == revision for _ in range(20))
    ws.index.hasher = hasher
    (ws.dir / "empty-dir").mkdir()
    assert ws.reread() == revision  # git does not record empty directories either

    total = ws.dir / "orders" / "total.py"
    old_stat = total.stat()
    total.write_text(total.read_text().replace("subtotal = 0", "subtotal = 1"))  # same size
    os.utime(total, ns=(old_stat.st_atime_ns, old_stat.st_mtime_ns))  # and the old mtime
    edited = ws.reread()
    assert edited != revision and edited == git_tree(ws.dir, tmp_path)
    total.chmod(0o755)
    executable = ws.reread()
    assert executable not in (revision, edited) and executable == git_tree(ws.dir, tmp_path)
    (ws.dir / "orders" / "link").symlink_to("total.py")
    assert ws.reread() == git_tree(ws.dir, tmp_path) != executable
    (ws.dir / ".gitignore").write_text("*\n")
    (ws.dir / "orders" / "hidden.py").write_text("EVIL = 1\n")
    assert ws.reread() != git_tree(ws.dir, tmp_path)  # unlike git, .gitignore cannot hide a file


def test_it_never_vouches_for_a_tree_it_cannot_hash(host_executor: SandboxExecutor) -> None:
    deep = host_executor.workspace.dir / "orders" / "/".join(["d"] * (fileops.MAX_DEPTH + 2))
    with host_executor.workspace.untrusted_code():  # during a check, behind the harness's tools
        deep.mkdir(parents=True)
        (deep / "x.py").write_text("hidden = True\n")
    with pytest.raises(RevisionMismatch, match="cannot be walked"):
        host_executor.verify()  # as a pickup, a publish or a finish does
    # An index to be rebuilt from a tree it cannot walk gives no value that stands.
    (host_executor.workspace.index.dir / "HEAD").unlink()
    first, second = host_executor.revision(), host_executor.revision()
    assert first.startswith("unhashable-") and second.startswith("unhashable-") and first != second


def make_repo(path: Path) -> list[str]:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@x", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@x"}
    shutil.copytree(ROOT / "examples" / "orders", path, ignore=shutil.ignore_patterns(*CACHES))
    subprocess.run(["git", "init", "-q", str(path)], check=True)
    commits = []
    for message in ("first", "second"):
        if message == "second":
            (path / "orders" / "extra.py").write_text("EXTRA = True\n")
        subprocess.run(["git", "add", "-A"], cwd=path, check=True, env=env)
        subprocess.run(["git", "commit", "-qm", message], cwd=path, check=True, env=env)
        commits.append(subprocess.run(["git", "rev-parse", "HEAD"], cwd=path, capture_output=True, text=True, check=True).stdout.strip())
    return commits


def test_it_prepares_workspaces_from_a_path_a_git_ref_and_archives(tmp_path: Path) -> None:
    first, second = make_repo(tmp_path / "repo")
    at_first = prepare_workspace(
        tmp_path / "ws-git", WorkspaceSource(kind="git", path=str(tmp_path / "repo"), ref=first), ROOT, (ROOT, tmp_path)
    )
    assert not (at_first.dir / "orders" / "extra.py").exists() and not (at_first.dir / ".git").exists()
    assert at_first.source["commit"] == first
    head = prepare_workspace(tmp_path / "ws-head", WorkspaceSource(kind="git", path=str(tmp_path / "repo")), ROOT, (ROOT, tmp_path))
    assert (head.dir / "orders" / "extra.py").exists() and head.source["commit"] == second
    path = prepare_workspace(tmp_path / "ws-path", WorkspaceSource(kind="path", path="examples/orders"), ROOT, (ROOT, tmp_path))
    assert path.revision() == at_first.revision()  # same content, same tree hash
    assert (
        prepare_workspace(tmp_path / "ws-path", WorkspaceSource(kind="path", path="nowhere"), ROOT, (ROOT, tmp_path)).revision()
        == path.revision()
    )  # reused

    with tarfile.open(tmp_path / "src.tar.gz", "w:gz") as tar:
        tar.add(ROOT / "examples" / "orders", arcname=".", filter=lambda m: None if set(m.name.split("/")) & CACHES else m)
    from_tar = prepare_workspace(
        tmp_path / "ws-tar", WorkspaceSource(kind="archive", path=str(tmp_path / "src.tar.gz")), ROOT, (ROOT, tmp_path)
    )
    with zipfile.ZipFile(tmp_path / "src.zip", "w") as archive:
        for file in sorted((ROOT / "examples" / "orders").rglob("*")):
            if file.is_file() and not set(file.parts) & CACHES:
                archive.write(file, file.relative_to(ROOT / "examples" / "orders").as_posix())
    from_zip = prepare_workspace(
        tmp_path / "ws-zip", WorkspaceSource(kind="archive", path=str(tmp_path / "src.zip")), ROOT, (ROOT, tmp_path)
    )
    assert from_tar.revision() == from_zip.revision() == path.revision()
    if os.geteuid() == 0:
        assert from_zip.dir.stat().st_uid == 65534 and (from_zip.dir / "orders" / "total.py").stat().st_uid == 65534


def tar_with(tmp_path: Path, name: str, member: tarfile.TarInfo, data: bytes = b"") -> Path:
    path = tmp_path / name
    with tarfile.open(path, "w:gz") as tar:
        member.size = len(data)
        tar.addfile(member, io.BytesIO(data) if data else None)
    return path


def test_it_refuses_unsafe_archives_and_bad_sources(tmp_path: Path) -> None:
    cases = {
        "dotdot.tar.gz": (tarfile.TarInfo("../evil.py"), "'..' would leave the workspace"),
        "absolute.tar.gz": (tarfile.TarInfo("/etc/evil"), "absolute or malformed path"),
    }
    link_out = tarfile.TarInfo("orders/out")
    link_out.type, link_out.linkname = tarfile.SYMTYPE, "../../../etc/passwd"
    cases["symlink.tar.gz"] = (link_out, "leaves the workspace")
    hard = tarfile.TarInfo("orders/hard")
    hard.type, hard.linkname = tarfile.LNKTYPE, "orders/total.py"
    cases["hardlink.tar.gz"] = (hard, "hard links are refused")
    for name, (member, message) in cases.items():
        archive = tar_with(tmp_path, name, member, b"x" if member.isfile() else b"")
        with pytest.raises(WorkspaceSourceError, match=message):
            prepare_workspace(tmp_path / f"ws-{name}", WorkspaceSource(kind="archive", path=str(archive)), ROOT, (ROOT, tmp_path))
        assert not (tmp_path / f"ws-{name}").exists()
    with zipfile.ZipFile(tmp_path / "evil.zip", "w") as zipped:
        zipped.writestr("../evil.py", "x")
    with pytest.raises(WorkspaceSourceError, match="'..'"):
        prepare_workspace(tmp_path / "ws-zip", WorkspaceSource(kind="archive", path=str(tmp_path / "evil.zip")), ROOT, (ROOT, tmp_path))
    with pytest.raises(WorkspaceSourceError, match="not a local git repository"):
        prepare_workspace(tmp_path / "ws-nogit", WorkspaceSource(kind="git", path="examples/orders"), ROOT, (ROOT, tmp_path))
    make_repo(tmp_path / "repo")
    with pytest.raises(WorkspaceSourceError, match="not a valid git ref"):
        prepare_workspace(
            tmp_path / "ws-ref", WorkspaceSource(kind="git", path=str(tmp_path / "repo"), ref="--upload-pack=evil"), ROOT, (ROOT, tmp_path)
        )
    with pytest.raises(WorkspaceSourceError, match="is not a commit"):
        prepare_workspace(
            tmp_path / "ws-ref2", WorkspaceSource(kind="git", path=str(tmp_path / "repo"), ref="nope"), ROOT, (ROOT, tmp_path)
        )
    with pytest.raises(WorkspaceSourceError, match="is not a directory"):
        prepare_workspace(tmp_path / "ws-missing", WorkspaceSource(kind="path", path="examples/missing"), ROOT, (ROOT, tmp_path))


def test_it_keeps_the_pristine_copy_out_of_the_mounted_directory(tmp_path: Path) -> None:
    ws: RunWorkspace = prepare_workspace(tmp_path / "run", WorkspaceSource(kind="path", path="examples/orders"), ROOT, (ROOT, tmp_path))
    assert ws.pristine.parent == ws.dir.parent == ws.root
    assert not ws.pristine.is_relative_to(ws.dir)
    ws.write_file("orders/total.py", "changed\n")
    assert (ws.pristine / "orders" / "total.py").read_text() != "changed\n"
    assert [c.path for c in ws.changes()] == ["orders/total.py"]


def test_it_keeps_a_git_source_once_as_its_objects_and_diffs_against_the_commit(tmp_path: Path) -> None:
    make_repo(tmp_path / "repo")
    ws = prepare_workspace(tmp_path / "run", WorkspaceSource(kind="git", path=str(tmp_path / "repo")), ROOT, (ROOT, tmp_path))
    assert ws.pristine_git.is_dir() and not ws.pristine.exists() and not (ws.dir / ".git").exists()
    assert ws.revision() == ws.base_revision() == git_tree(tmp_path / "repo", tmp_path)
    ws.write_file("orders/total.py", "changed\n")
    ws.apply_patch(patches.unified_diff("orders/extra.py", "EXTRA = True\n", None))
    diff = ws.diff()
    assert diff.files == ["orders/extra.py", "orders/total.py"]
    assert "-EXTRA = True" in diff.text and "+changed" in diff.text and "-    subtotal = 0" in diff.text

    # A checkout that is not byte for byte the commit (here git converts line ends)
    # keeps its own pristine tree: the diff shows what the run changed, nothing else.
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@x", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@x"}
    (tmp_path / "repo" / ".gitattributes").write_text("*.txt text eol=crlf\n")
    (tmp_path / "repo" / "notes.txt").write_text("one\ntwo\n")
    subprocess.run(["git", "add", "-A"], cwd=tmp_path / "repo", check=True, env=env)
    subprocess.run(["git", "commit", "-qm", "crlf"], cwd=tmp_path / "repo", check=True, env=env)
    converted = prepare_workspace(tmp_path / "run2", WorkspaceSource(kind="git", path=str(tmp_path / "repo")), ROOT, (ROOT, tmp_path))
    assert (converted.dir / "notes.txt").read_bytes() == b"one\r\ntwo\r\n"
    assert converted.pristine.is_dir() and not converted.pristine_git.exists()
    converted.write_file("orders/total.py", "changed\n")
    assert converted.diff().files == ["orders/total.py"]


def test_it_never_diffs_against_a_pristine_file_changed_through_its_shared_inode(tmp_path: Path) -> None:
    """The pristine tree shares its files' inodes with the workspace as prepared. Only
    a write in place could reach it (the harness's tools rename a new file over the
    old; checks see the workspace read-only): the walk after the code that did it
    stops the run, and no diff is made after that."""
    ws: RunWorkspace = prepare_workspace(tmp_path / "run", WorkspaceSource(kind="path", path="examples/orders"), ROOT, (ROOT, tmp_path))
    with ws.untrusted_code(), open(ws.dir / "orders" / "total.py", "r+") as handle:
        handle.write("# in place\n")
    with pytest.raises(RevisionMismatch, match="differs from a full walk"):
        publication(ws, ("orders/*",))  # what a preview and publish both read
    with pytest.raises(RevisionMismatch):
        ws.diff()


def test_it_refuses_a_workspace_source_outside_the_allowed_roots(tmp_path: Path) -> None:
    for outside in ("/etc", "../../etc", str(tmp_path / ".." / "elsewhere")):
        with pytest.raises(WorkspaceSourceError, match="outside the allowed workspace sources"):
            prepare_workspace(tmp_path / "ws", WorkspaceSource(kind="path", path=outside), ROOT, (ROOT / "examples",))
    assert not (tmp_path / "ws").exists()
