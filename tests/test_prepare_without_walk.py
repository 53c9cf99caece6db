"""A workspace prepared without a full walk: a git source checked out as the sandbox's
uid with the commit's tree objects as its revision (``sandbox/workspace/checkout.py``), the cases
where the checkout is walked instead because git may not have written the tree
verbatim, and a directory source copied, hashed and linked in one pass
(``sandbox/workspace/copying.py``)."""

from __future__ import annotations

import os
import subprocess
import threading
import time
import zlib
from pathlib import Path
from typing import Any, Literal

import pytest

from core.contract import WorkspaceSource
from core.ports import RevisionMismatch
from sandbox.workspace import checkout
from sandbox.workspace.fileops import MAX_DEPTH
from sandbox.workspace.hashing import TreeHasher
from sandbox.workspace.preparation import SANDBOX_UID, open_workspace, prepare_workspace
from sandbox.workspace.run_workspace import RunWorkspace
from sandbox.workspace.sources import WorkspaceSourceError
from tests.fixtures_sandbox import count_walks

ENV = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@x", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@x"}


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, check=True, env=ENV, capture_output=True, text=True).stdout.strip()


def make_repo(repo: Path) -> None:
    (repo / "pkg" / "deep").mkdir(parents=True)
    (repo / "pkg" / "deep" / "a.py").write_text("A = 1\n")
    (repo / "run.sh").write_text("#!/bin/sh\necho hi\n")
    (repo / "run.sh").chmod(0o755)
    (repo / "README.md").write_text("# repo\n")
    os.symlink("pkg/deep/a.py", repo / "link.py")
    git(repo, "init", "-q")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "first")


def prepare(tmp_path: Path, name: str) -> RunWorkspace:
    return prepare_workspace(tmp_path / name, WorkspaceSource(kind="git", path=str(tmp_path / "repo")), tmp_path, (tmp_path,))


def trees(repo: Path, ref: str) -> tuple[str, dict[bytes, bytes]]:
    """What the preparation reads of ``ref``'s commit (NotTrusted when it cannot be trusted)."""
    with checkout.GitObjects(repo / ".git") as objects:
        named = objects.commit(ref)
        assert named is not None
        return checkout.commit_trees(objects, named[1])


def walked(ws: RunWorkspace) -> bool:
    # Only a walk records the workspace's size before it is asked for; the trusted
    # checkout leaves it to the first check.
    return (ws.index.dir / "usage").exists()


def test_it_checks_a_git_source_out_as_the_sandbox_uid_with_the_commits_trees_as_its_revision(tmp_path: Path) -> None:
    make_repo(tmp_path / "repo")
    ws = prepare(tmp_path, "run")
    assert not walked(ws)
    assert ws.revision() == ws.base_revision() == git(tmp_path / "repo", "rev-parse", "HEAD^{tree}")
    owners = {os.lstat(os.path.join(d, n)).st_uid for d, dirs, files in os.walk(ws.dir) for n in dirs + files} | {ws.dir.stat().st_uid}
    assert owners == {SANDBOX_UID}
    assert os.stat(ws.dir / "run.sh").st_mode & 0o777 == 0o755 and os.readlink(ws.dir / "link.py") == "pkg/deep/a.py"
    # A full walk agrees and records the size; the diff reads the commit's objects.
    assert ws.verify() == ws.revision() == TreeHasher().tree(ws.dir) and walked(ws)
    ws.write_file("pkg/deep/a.py", "A = 2\n")
    assert ws.diff().files == ["pkg/deep/a.py"]


def test_it_stops_at_the_next_full_walk_when_a_trusted_checkout_differs_after_all(tmp_path: Path) -> None:
    make_repo(tmp_path / "repo")
    ws = prepare(tmp_path, "run")
    (ws.dir / "README.md").write_text("# not the commit's\n")
    with pytest.raises(RevisionMismatch, match="differs from a full walk"):
        ws.verify()


@pytest.mark.parametrize("kind", ["attributes", "gitlink", "nested attributes"])
def test_it_walks_a_checkout_git_may_not_have_written_verbatim(tmp_path: Path, kind: str) -> None:
    repo = tmp_path / "repo"
    make_repo(repo)
    if kind == "gitlink":
        # A submodule checks out as an empty directory, which the walk leaves out.
        git(repo, "update-index", "--add", "--cacheinfo", f"160000,{git(repo, 'rev-parse', 'HEAD')},sub")
    else:
        where = repo / ("pkg" if kind == "nested attributes" else "")
        (where / ".gitattributes").write_text("*.py text eol=lf\n")
        git(repo, "add", "-A")
    git(repo, "commit", "-qm", kind)
    with pytest.raises(checkout.NotTrusted):
        trees(repo, "HEAD")
    ws = prepare(tmp_path, "run")
    assert walked(ws) and ws.verify() == ws.revision()
    assert {os.lstat(os.path.join(d, n)).st_uid for d, dirs, files in os.walk(ws.dir) for n in dirs + files} == {SANDBOX_UID}


@pytest.mark.parametrize("shape", ["out of order", "a name twice", "an empty tree"])
def test_it_refuses_to_trust_a_tree_not_in_canonical_form(tmp_path: Path, shape: str) -> None:
    """git would check such a tree out as something else than its hash says (or not
    at all): the walk decides instead."""
    repo = tmp_path / "repo"
    make_repo(repo)
    blob = bytes.fromhex(git(repo, "rev-parse", "HEAD:README.md"))
    empty = bytes.fromhex(git(repo, "hash-object", "-t", "tree", "-w", "--stdin"))
    entries = {
        "out of order": [(b"100644", b"b", blob), (b"100644", b"a", blob)],
        "a name twice": [(b"100644", b"a", blob), (b"100644", b"a", blob)],
        "an empty tree": [(b"100644", b"a", blob), (b"40000", b"d", empty)],
    }[shape]
    body = b"".join(mode + b" " + name + b"\0" + sha for mode, name, sha in entries)
    made = subprocess.run(
        ["git", "hash-object", "-t", "tree", "-w", "--literally", "--stdin"], cwd=repo, input=body, check=True, capture_output=True
    )
    commit = git(repo, "commit-tree", "-m", shape, made.stdout.decode().strip())
    with pytest.raises(checkout.NotTrusted, match="canonical"):
        trees(repo, commit)


@pytest.mark.parametrize(
    ("entries", "refused"),
    [
        ([(b"100644", b".GIT", "blob")], "holds the name"),
        ([(b"100644", b"a/b", "blob")], "holds the name"),
        ([(b"100644", b"..", "blob")], "holds the name"),
        ([(b"100644", b"a", "blob"), (b"040000", b"d", "tree")], "holds an entry of mode 040000"),
        ([(b"100644", b"a", "blob"), (b"40000", b"a", "tree")], "canonical"),  # a file and a directory of one name
        ([(b"40000", b"a", "tree"), (b"100644", b"a.py", "blob")], "canonical"),  # git sorts the tree as "a/", after "a.py"
        ([(b"100644", b"a", "cut")], "malformed"),
    ],
    ids=["dot-git in capitals", "a slash", "dot-dot", "a padded mode", "a name as file and tree", "a tree sorted as a file", "cut short"],
)
def test_it_refuses_to_trust_a_tree_git_would_not_write_as_it_says(
    tmp_path: Path, entries: list[tuple[bytes, bytes, str]], refused: str
) -> None:
    repo = tmp_path / "repo"
    make_repo(repo)
    objects = {"blob": bytes.fromhex(git(repo, "rev-parse", "HEAD:README.md")), "tree": bytes.fromhex(git(repo, "rev-parse", "HEAD:pkg"))}
    objects["cut"] = objects["blob"][:10]
    body = b"".join(mode + b" " + name + b"\0" + objects[kind] for mode, name, kind in entries)
    made = subprocess.run(
        ["git", "hash-object", "-t", "tree", "-w", "--literally", "--stdin"], cwd=repo, input=body, check=True, capture_output=True
    )
    commit = git(repo, "commit-tree", "-m", "odd", made.stdout.decode().strip())
    with pytest.raises(checkout.NotTrusted, match=refused):
        trees(repo, commit)


def test_it_copies_a_directory_source_once_hashing_and_linking_as_it_goes(tmp_path: Path) -> None:
    src = tmp_path / "src"
    make_repo(src)
    (src / "pkg" / "__pycache__").mkdir()
    (src / "pkg" / "__pycache__" / "a.pyc").write_bytes(b"\0")
    (src / "empty").mkdir()
    os.mkfifo(src / "pipe")
    os.utime(src / "README.md", ns=(1, 1_000_000_000))
    ws = prepare_workspace(tmp_path / "run", WorkspaceSource(kind="path", path=str(src)), tmp_path, (tmp_path,))
    assert not walked(ws)
    assert not (ws.dir / ".git").exists() and not (ws.dir / "pipe").exists() and not (ws.dir / "pkg" / "__pycache__").exists()
    assert (ws.dir / "empty").is_dir() and os.stat(ws.dir / "README.md").st_mtime_ns == 1_000_000_000
    assert os.stat(ws.dir / "run.sh").st_mode & 0o777 == 0o755 and os.readlink(ws.dir / "link.py") == "pkg/deep/a.py"
    owners = {os.lstat(os.path.join(d, n)).st_uid for d, dirs, files in os.walk(ws.dir) for n in dirs + files}
    assert owners | {ws.dir.stat().st_uid} == {SANDBOX_UID}
    assert os.stat(ws.pristine / "pkg" / "deep" / "a.py").st_ino == os.stat(ws.dir / "pkg" / "deep" / "a.py").st_ino
    assert ws.revision() == ws.base_revision() == git(src, "rev-parse", "HEAD^{tree}") == ws.verify() and walked(ws)
    ws.write_file("pkg/deep/a.py", "A = 2\n")
    assert ws.diff().files == ["pkg/deep/a.py"]


def test_it_refuses_to_trust_a_tree_nested_deeper_than_the_walk_descends(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    make_repo(repo)
    deep = repo.joinpath(*["d"] * (MAX_DEPTH + 1))
    deep.mkdir(parents=True)
    (deep / "f").write_text("deep\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "deep")
    with pytest.raises(checkout.NotTrusted, match="nested deeper"):
        trees(repo, "HEAD")


@pytest.mark.parametrize("kind", ["git", "path"])
def test_it_picks_a_workspace_it_has_just_made_up_without_walking_it(
    tmp_path: Path, kind: Literal["git", "path"], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The pickup right after preparation relies on what preparation proved (the
    commit's trees, or the hashes taken as it copied); the quota's size is counted
    from the entries' status, as a walk would count it, without reading a file."""
    make_repo(tmp_path / "repo")
    ws = prepare_workspace(tmp_path / "run", WorkspaceSource(kind=kind, path=str(tmp_path / "repo")), tmp_path, (tmp_path,))
    walks = count_walks(monkeypatch)
    assert ws.picked_up() == ws.revision() == git(tmp_path / "repo", "rev-parse", "HEAD^{tree}")
    counted = ws.index.usage()
    assert walks == []
    walker = TreeHasher()
    walker.tree(ws.dir)
    assert counted == walker.allocated > 0
    # Once only: the same workspace picked up again is read in full.
    assert ws.picked_up() == ws.revision() and len(walks) == 2


@pytest.mark.parametrize("since", ["opened again", "written", "a check ran"])
def test_it_walks_at_the_pickup_of_a_workspace_it_did_not_just_make(tmp_path: Path, since: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A workspace found on the disk (a resumed run, a run back on this host), or one
    written or checked since it was made, is read in full at pickup: a change that
    came around the harness's tools stops the run there."""
    make_repo(tmp_path / "repo")
    ws = prepare(tmp_path, "run")
    if since == "opened again":
        found = open_workspace(ws.root)
        assert found is not None
        ws = found
    elif since == "written":
        ws.write_file("pkg/deep/a.py", "A = 2\n")
    else:
        with ws.untrusted_code():
            pass
    (ws.dir / "README.md").write_text("# changed behind the run's back\n")
    walks = count_walks(monkeypatch)
    with pytest.raises(RevisionMismatch, match="differs from a full walk"):
        ws.picked_up()
    assert walks == [str(ws.dir)]


def started_processes(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The processes started from now on, by program ("git <command>" for git)."""
    started: list[str] = []

    class Counted(subprocess.Popen[bytes]):
        def __init__(self, args: list[str], *rest: Any, **kw: Any) -> None:
            started.append(args[0] if args[0] != "git" else f"git {args[1]}")
            super().__init__(args, *rest, **kw)

    monkeypatch.setattr(subprocess, "Popen", Counted)
    return started


def test_it_prepares_a_git_source_with_three_processes_and_reads_a_level_wider_than_a_pipe_holds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The clone, one ``git cat-file --batch`` for the commit and all its trees, and
    the checkout as the sandbox's uid; a level of trees whose names and answers each
    fill more than a pipe (64 KiB here) is read whole and in order, written while
    the answers are read."""
    repo = tmp_path / "repo"
    make_repo(repo)
    # Made with git's plumbing, not files: 2,000 directories of two long names each for one blob.
    blob = git(repo, "rev-parse", "HEAD:README.md")
    listing = "".join("".join(f"100644 blob {blob}\t{k}{n:0>240}\n" for k in "ab") + "\n" for n in range(2000))
    dirs = subprocess.run(["git", "mktree", "--batch"], cwd=repo, input=listing, check=True, capture_output=True, text=True).stdout.split()
    root = git(repo, "ls-tree", "HEAD").splitlines() + [f"040000 tree {sha}\tdir{n:04}" for n, sha in enumerate(dirs)]
    tree = subprocess.run(
        ["git", "mktree"], cwd=repo, input="\n".join(root) + "\n", check=True, capture_output=True, text=True
    ).stdout.strip()
    git(repo, "update-ref", "HEAD", git(repo, "commit-tree", tree, "-p", "HEAD", "-m", "wide"))
    started = started_processes(monkeypatch)
    made: list[RunWorkspace] = []
    preparing = threading.Thread(target=lambda: made.append(prepare(tmp_path, "run")), daemon=True)
    preparing.start()
    preparing.join(120)
    assert made, "the preparation did not end: git and the reader each waited for the other"
    ws = made[0]
    assert started == ["git clone", "git cat-file", "setpriv"]
    assert not walked(ws) and ws.revision() == git(repo, "rev-parse", "HEAD^{tree}") == ws.verify()
    assert len(trees(repo, "HEAD")[1]) == 2003  # the root, pkg, pkg/deep and the 2,000


def test_it_links_the_sources_objects_for_a_commit_named_by_its_hash_without_a_clone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As a rebuild names the commit the run was prepared at: the objects hard-linked
    as the clone links them, the commit's tree checked out and trusted as from a clone."""
    repo = tmp_path / "repo"
    make_repo(repo)
    first = git(repo, "rev-parse", "HEAD")
    (repo / "README.md").write_text("# moved on\n")
    git(repo, "commit", "-qam", "moved on")
    git(repo, "gc", "-q")  # packed: the pack and its index are linked as any object file
    started = started_processes(monkeypatch)
    ws = prepare_workspace(tmp_path / "run", WorkspaceSource(kind="git", path=str(repo), ref=first), tmp_path, (tmp_path,))
    assert started == ["git cat-file"]  # the small tree written from its blobs, no checkout process
    assert ws.source["commit"] == first and (ws.dir / "README.md").read_text() == "# repo\n"
    assert not walked(ws) and ws.revision() == ws.base_revision() == git(repo, "rev-parse", f"{first}^{{tree}}") == ws.verify()
    packs = sorted((repo / ".git" / "objects" / "pack").iterdir())
    assert [os.stat(ws.pristine_git / "objects" / "pack" / pack.name).st_ino for pack in packs] == [os.stat(pack).st_ino for pack in packs]
    ws.write_file("README.md", "# changed\n")
    assert ws.diff().files == ["README.md"]  # the pristine side read from the linked objects
    missing = "0" * 40
    with pytest.raises(WorkspaceSourceError, match="is not a commit"):
        prepare_workspace(tmp_path / "none", WorkspaceSource(kind="git", path=str(repo), ref=missing), tmp_path, (tmp_path,))


@pytest.mark.parametrize("kind", ["alternates", "worktree"])
def test_it_clones_where_the_sources_objects_are_not_its_own_files(tmp_path: Path, kind: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Objects borrowed from another repository (alternates) or a git directory found
    through a ``.git`` file: git finds them, so the clone decides, as it always did."""
    origin = tmp_path / "origin"
    make_repo(origin)
    commit = git(origin, "rev-parse", "HEAD")
    repo = tmp_path / "repo"
    if kind == "alternates":
        git(tmp_path, "clone", "-q", "--shared", str(origin), str(repo))
        assert not any((repo / ".git" / "objects").glob("??/*"))  # every object is the origin's
    else:
        git(origin, "worktree", "add", "-q", "--detach", str(repo))
    started = started_processes(monkeypatch)
    ws = prepare_workspace(tmp_path / "run", WorkspaceSource(kind="git", path=str(repo), ref=commit), tmp_path, (tmp_path,))
    assert started[0] == "git clone" and ws.source["commit"] == commit
    assert ws.revision() == git(origin, "rev-parse", "HEAD^{tree}") == ws.verify()


def test_it_counts_an_adopted_workspaces_size_when_first_asked_and_moves_it_with_each_write_after(tmp_path: Path) -> None:
    """Writes before the first ask move no size (none is recorded: the ask counts the
    tree as it is then); writes after it move the recorded size, as on a walked tree."""
    make_repo(tmp_path / "repo")
    ws = prepare(tmp_path, "run")
    ws.write_file("big.txt", "#" * (1 << 20))
    assert not walked(ws)
    walker = TreeHasher()
    walker.tree(ws.dir)
    assert ws.index.usage() == walker.allocated > 1 << 20
    ws.write_file("big.txt", "#" * (3 << 20))
    walker.tree(ws.dir)
    assert ws.index.usage() == walker.allocated > 3 << 20


def checked_out(tree: Path) -> dict[str, tuple[int, bytes]]:
    """Each path under ``tree`` (its ``.git`` left out): its type and permissions, and
    its content or link target."""
    found = {}
    for dirpath, dirnames, filenames in os.walk(tree):
        dirnames[:] = [d for d in dirnames if not (d == ".git" and dirpath == str(tree))]
        for name in dirnames + filenames:
            path = os.path.join(dirpath, name)
            mode = os.lstat(path).st_mode
            content = os.readlink(path).encode() if os.path.islink(path) else b"" if name in dirnames else Path(path).read_bytes()
            found[os.path.relpath(path, tree)] = (mode, content)
    return found


def gits_checkout(tmp_path: Path, repo: Path, commit: str) -> dict[str, tuple[int, bytes]]:
    made = tmp_path / "by-git"
    git(tmp_path, "clone", "-q", "--no-checkout", str(repo), str(made))
    subprocess.run(["git", "checkout", "-q", commit], cwd=made, check=True, capture_output=True, umask=0o022)
    return checked_out(made)


def test_it_writes_a_small_trees_files_from_their_blobs_as_gits_checkout_writes_them_owned_by_the_sandbox_uid(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No checkout process: the files, the executable bit, the symlinks and the nested
    directories are those git's checkout writes, byte for byte (line ends and an
    attribute-free filter-looking name untouched), and the sandbox's uid owns them."""
    repo = tmp_path / "repo"
    make_repo(repo)
    (repo / "pkg" / "deep" / "deeper").mkdir()
    (repo / "pkg" / "deep" / "deeper" / "crlf.txt").write_bytes(b"one\r\ntwo\r\n\0binary")
    (repo / "pkg" / "deep" / "deeper" / "empty").write_bytes(b"")
    (repo / "pkg" / "deep" / "tool").write_text("#!/bin/sh\n")
    (repo / "pkg" / "deep" / "tool").chmod(0o755)
    os.symlink("../README.md", repo / "pkg" / "up")
    os.symlink("nowhere/at/all", repo / "dangling")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "more")
    commit = git(repo, "rev-parse", "HEAD")
    started = started_processes(monkeypatch)
    os.umask(umask := os.umask(0o077))  # a worker's own umask does not decide the modes
    try:
        ws = prepare_workspace(tmp_path / "run", WorkspaceSource(kind="git", path=str(repo), ref=commit), tmp_path, (tmp_path,))
    finally:
        os.umask(umask)
    assert started == ["git cat-file"]
    assert checked_out(ws.dir) == gits_checkout(tmp_path, repo, commit)
    owners = {os.lstat(os.path.join(d, n)).st_uid for d, dirs, files in os.walk(ws.dir) for n in dirs + files}
    assert owners | {ws.dir.stat().st_uid} == {SANDBOX_UID}
    assert not walked(ws) and ws.revision() == git(repo, "rev-parse", "HEAD^{tree}") == ws.verify()


@pytest.mark.parametrize("name", ["x~1", "caf\u00e9", "a:b", "ends.", "ends ", " starts"])
def test_it_leaves_a_tree_with_a_name_git_might_treat_otherwise_to_gits_checkout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    repo = tmp_path / "repo"
    make_repo(repo)
    (repo / "pkg" / name).write_text("odd\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "odd")
    commit = git(repo, "rev-parse", "HEAD")
    started = started_processes(monkeypatch)
    ws = prepare_workspace(tmp_path / "run", WorkspaceSource(kind="git", path=str(repo), ref=commit), tmp_path, (tmp_path,))
    assert started == ["git cat-file", "setpriv"]
    assert checked_out(ws.dir) == gits_checkout(tmp_path, repo, commit)
    assert not walked(ws) and ws.revision() == ws.verify()


@pytest.mark.parametrize(
    ("mode", "name"),
    [("100644", ".git."), ("100644", "GIT~1"), ("100644", ".git "), ("100644", ".Git::$INDEX_ALLOCATION"), ("120000", ".gitmodules")],
)
def test_it_refuses_a_small_tree_with_a_name_gits_checkout_refuses(tmp_path: Path, mode: str, name: str) -> None:
    """Names git protects its own directory from on any filesystem, and a symlink as
    ``.gitmodules``: refused as git refuses them."""
    repo = tmp_path / "repo"
    make_repo(repo)
    blob = git(repo, "rev-parse", "HEAD:README.md")
    listing = f"100644 blob {blob}\tREADME.md\n{mode} blob {blob}\t{name}\n"
    tree = subprocess.run(["git", "mktree"], cwd=repo, input=listing, check=True, capture_output=True, text=True).stdout.strip()
    commit = git(repo, "commit-tree", tree, "-m", "refused")
    with pytest.raises(WorkspaceSourceError, match="invalid path"):
        prepare_workspace(tmp_path / "run", WorkspaceSource(kind="git", path=str(repo), ref=commit), tmp_path, (tmp_path,))
    assert not (tmp_path / "run").exists()


def test_it_walks_a_small_trees_checkout_when_a_blob_does_not_hash_to_its_name(tmp_path: Path) -> None:
    """A damaged object git reads without a word: what the disk holds then is walked,
    not taken to be the commit's tree."""
    repo = tmp_path / "repo"
    make_repo(repo)
    blob = git(repo, "rev-parse", "HEAD:README.md")
    (repo / ".git" / "objects" / blob[:2] / blob[2:]).chmod(0o644)
    (repo / ".git" / "objects" / blob[:2] / blob[2:]).write_bytes(zlib.compress(b"blob 10\0# damaged\n"))
    ws = prepare(tmp_path, "run")
    assert (ws.dir / "README.md").read_text() == "# damaged\n"
    assert walked(ws) and ws.revision() == ws.verify() != git(repo, "rev-parse", "HEAD^{tree}")


def test_it_kills_a_git_cat_file_that_outlives_its_bound_and_only_that_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """One thread bounds every preparation's ``git cat-file``: the one still open after
    ``GIT_TIMEOUT`` is killed (its read fails), one opened later is not."""
    make_repo(tmp_path / "repo")
    monkeypatch.setattr(checkout, "GIT_TIMEOUT", 1.0)
    with checkout.GitObjects(tmp_path / "repo" / ".git") as early:
        time.sleep(0.6)
        with checkout.GitObjects(tmp_path / "repo" / ".git") as later:
            time.sleep(0.6)  # past the first's bound, not the second's
            assert later.commit("HEAD") is not None
            with pytest.raises(checkout.NotTrusted, match="git cat-file failed"):
                early.commit("HEAD")
