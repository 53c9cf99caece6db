"""Checking a published patch with git itself: ``git apply --check`` against the
run's source revision, then applying it and comparing the tree git builds with the
workspace revision the harness computed."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from sandbox.workspace.run_workspace import RunWorkspace

GIT_ENV = {
    "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
    "HOME": "/nonexistent",
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": "/dev/null",
    "GIT_AUTHOR_NAME": "t",
    "GIT_AUTHOR_EMAIL": "t@example.invalid",
    "GIT_COMMITTER_NAME": "t",
    "GIT_COMMITTER_EMAIL": "t@example.invalid",
}


def git(repo: Path, *args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(["git", "-C", str(repo), *args], input=stdin, capture_output=True, env=GIT_ENV, check=False)


def git_applies_to_source(workspace: RunWorkspace, patch: bytes, repo: Path) -> None:
    """Assert that git accepts ``patch`` for the workspace's source and that applying
    it gives exactly the workspace's current tree."""
    shutil.copytree(workspace.pristine, repo, symlinks=True)
    for args in (("init", "-q"), ("add", "-A"), ("commit", "-q", "--allow-empty", "-m", "source")):
        done = git(repo, *args)
        assert done.returncode == 0, done.stderr.decode()
    checked = git(repo, "apply", "--check", "-", stdin=patch)
    assert checked.returncode == 0, f"git apply --check refused the published patch: {checked.stderr.decode()}"
    applied = git(repo, "apply", "-", stdin=patch)
    assert applied.returncode == 0, applied.stderr.decode()
    git(repo, "add", "-A")
    tree = git(repo, "write-tree").stdout.decode().strip()
    assert tree == workspace.revision(), "the published patch does not reproduce the workspace"


def patch_applies_to_source(workspace: RunWorkspace, patch: bytes, root: Path) -> None:
    """Assert that GNU ``patch -p1`` applies ``patch`` to a copy of the workspace's
    source and that the result is exactly the workspace's current tree (git hashes it)."""
    shutil.copytree(workspace.pristine, root, symlinks=True)
    done = subprocess.run(
        ["patch", "-p1", "--batch", "--forward", "--no-backup-if-mismatch", "-s"],
        input=patch,
        cwd=root,
        capture_output=True,
        env=GIT_ENV,
        check=False,
    )
    assert done.returncode == 0, f"patch -p1 refused the published patch: {done.stdout.decode()}{done.stderr.decode()}"
    for args in (("init", "-q"), ("add", "-A")):
        assert git(root, *args).returncode == 0
    tree = git(root, "write-tree").stdout.decode().strip()
    assert tree == workspace.revision(), "patch -p1 of the published patch does not reproduce the workspace"
