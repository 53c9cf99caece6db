"""The full walk with helper processes (sandbox/workspace/hashing.py, sandbox/workspace/walker.py) gives
what the walk alone gives, and git: the same tree hash, tree objects, allocation
and blob cache, on trees large enough to take the parallel path; an error a helper
meets fails the walk exactly as it fails the walk alone."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
from pathlib import Path

import pytest

from sandbox.workspace import fileops, hashing
from sandbox.workspace.hashing import TreeHasher
from tests.test_sandbox_tools import git_tree


def skewed_tree(root: Path) -> None:
    """More than PARALLEL_AFTER files, most of them under one subtree, with the
    kinds of entries git records: executables, symlinks (to a file, a directory,
    outside), an empty directory and odd names."""
    for n in range(hashing.PARALLEL_AFTER + 1500):
        directory = root / "big" / f"p{n // 1000}" / f"m{n // 50}"
        directory.mkdir(parents=True, exist_ok=True)
        (directory / f"f{n}.py").write_text(f"N = {n}\n")
    for n in range(30):
        (root / f"small{n}").mkdir()
        (root / f"small{n}" / "a.txt").write_text("a" * n)
    (root / "big" / "p0" / "m0" / "run.sh").write_text("#!/bin/sh\n")
    (root / "big" / "p0" / "m0" / "run.sh").chmod(0o755)
    (root / "links").mkdir()
    (root / "links" / "to-file").symlink_to("../small1/a.txt")
    (root / "links" / "to-dir").symlink_to("../big")
    (root / "links" / "outside").symlink_to("/etc/passwd")
    (root / "empty" / "deeper").mkdir(parents=True)
    (root / "names").mkdir()
    for name in ("a-b", "a.b", "a", "a b", "é"):
        (root / "names" / name).write_text(name)
    (root / "names" / "a0").mkdir()
    (root / "names" / "a0" / "x").write_text("x")


def walked(hasher: TreeHasher, root: Path) -> tuple[str, dict[bytes, bytes]]:
    objects: dict[bytes, bytes] = {}
    return hasher.tree(root, objects.__setitem__), objects


def git_objects(directory: Path, tmp_path: Path, shas: list[bytes]) -> dict[bytes, bytes]:
    """The bodies git stored under ``shas`` after ``git_tree`` wrote them."""
    env = {"PATH": os.environ["PATH"], "GIT_DIR": str(tmp_path / "private.git"), "HOME": str(tmp_path)}
    out = subprocess.run(
        ["git", "cat-file", "--batch"], input=b"".join(sha.hex().encode() + b"\n" for sha in shas), env=env, capture_output=True, check=True
    ).stdout
    bodies: dict[bytes, bytes] = {}
    for sha in shas:
        header, out = out.split(b"\n", 1)
        _, kind, size = header.split(b" ")
        assert kind == b"tree"
        bodies[sha], out = out[: int(size)], out[int(size) + 1 :]
    return bodies


def test_it_walks_in_parallel_to_what_the_walk_alone_and_git_give(tmp_path: Path) -> None:
    root = tmp_path / "tree"
    skewed_tree(root)
    alone, parallel = TreeHasher(racy_ns=0, helpers=0), TreeHasher(racy_ns=0, helpers=1)
    revision, objects = walked(alone, root)
    assert alone.delegated == 0
    assert walked(parallel, root) == (revision, objects)
    assert parallel.delegated > 0  # the helpers hashed some of the directories
    assert revision == git_tree(root, tmp_path)
    assert git_objects(root, tmp_path, list(objects)) == objects
    assert parallel.allocated == alone.allocated > 0
    assert parallel._blobs == alone._blobs and sum(map(len, alone._blobs.values())) > hashing.PARALLEL_AFTER

    # The cache the helpers filled is used (by them too) and still sees an edit.
    target = root / "big" / "p1" / "m30" / "f1500.py"
    assert walked(parallel, root) == (revision, objects)
    target.write_text("N = -1\n")
    edited = parallel.tree(root)
    assert edited != revision and edited == TreeHasher(helpers=0).tree(root) == git_tree(root, tmp_path)


def test_it_hashes_a_special_file_and_never_follows_a_symlink_with_helpers(tmp_path: Path) -> None:
    root = tmp_path / "tree"
    skewed_tree(root)
    os.mkfifo(root / "small3" / "fifo")
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(root / "small4" / "sock"))
        parallel = TreeHasher(parallel_after=0, helpers=1)  # helpers from the first directory on
        assert parallel.tree(root) == TreeHasher(helpers=0).tree(root) != git_tree(root, tmp_path)
    assert parallel.delegated > 0


@pytest.mark.parametrize("where", ["big/p0/m0", "small7"])
def test_it_raises_a_helpers_error_as_the_walk_alone_does(tmp_path: Path, where: str) -> None:
    root = tmp_path / "tree"
    skewed_tree(root)
    (root / where / "/".join(["d"] * (fileops.MAX_DEPTH + 2)) / "f").mkdir(parents=True)
    with pytest.raises(fileops.FileRefused) as alone:
        TreeHasher(helpers=0).tree(root)
    for parallel_after in (0, hashing.PARALLEL_AFTER):
        with pytest.raises(fileops.FileRefused) as parallel:
            TreeHasher(parallel_after=parallel_after, helpers=1).tree(root)
        assert str(parallel.value) == str(alone.value) and "deeper than" in str(alone.value)


def test_it_raises_the_error_of_a_directory_only_a_helper_was_free_for(tmp_path: Path) -> None:
    """A chain of single directories too deep: each is the only one to hash, and the
    helpers take it first; the one a helper cannot hash is the walk's to fail on."""
    root = tmp_path / "tree"
    (root / "/".join(["d"] * (fileops.MAX_DEPTH + 2))).mkdir(parents=True)
    (root / "/".join(["d"] * (fileops.MAX_DEPTH + 2)) / "f").write_text("f")
    signal.alarm(120)  # a walk handing the directory back and forth would never end
    try:
        with pytest.raises(fileops.FileRefused) as alone:
            TreeHasher(helpers=0).tree(root)
        with pytest.raises(fileops.FileRefused) as parallel:
            TreeHasher(parallel_after=0, helpers=1).tree(root)
    finally:
        signal.alarm(0)
    assert str(parallel.value) == str(alone.value)


def test_it_goes_on_alone_when_a_helper_dies(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "tree"
    skewed_tree(root)
    real_send = hashing._Helper.send

    def send_then_die(helper: hashing._Helper, directory: hashing._Dir, task: hashing.Task) -> None:
        real_send(helper, directory, task)
        if helper._next == 3:
            helper.process.kill()

    monkeypatch.setattr(hashing._Helper, "send", send_then_die)
    parallel = TreeHasher(parallel_after=0, helpers=1)
    assert parallel.tree(root) == TreeHasher(helpers=0).tree(root)


def test_it_sends_and_receives_directories_larger_than_a_pipe_holds(tmp_path: Path) -> None:
    """Wide directories with a warm cache: what goes to a helper and what comes back
    are each many times a pipe's buffer, and neither side waits for the other."""
    root = tmp_path / "tree"
    for d in range(4):
        (root / f"wide{d}").mkdir(parents=True)
        for n in range(3000):
            (root / f"wide{d}" / f"a-rather-long-file-name-{n}.txt").write_text(str(n))
    alone, parallel = TreeHasher(racy_ns=0, helpers=0), TreeHasher(racy_ns=0, parallel_after=0, helpers=1)
    revision = alone.tree(root)
    assert parallel.tree(root) == revision and parallel.delegated > 0
    assert parallel.tree(root) == revision and parallel.delegated > 0  # now each task carries its cached blobs
    assert parallel._blobs == alone._blobs
