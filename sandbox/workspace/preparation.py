"""Preparing a run's workspace from its source (a directory, a local git
repository, an archive or an allowed remote), once, in a staging directory renamed into
place; the layout is described in ``sandbox.workspace.run_workspace``."""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import stat
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path

from core.contract import WorkspaceSource
from core.jsonutil import JSON
from sandbox.vcs import remote
from sandbox.vcs.remote import RemoteAccess
from sandbox.workspace import checkout
from sandbox.workspace.archives import extract_archive
from sandbox.workspace.copying import Copier
from sandbox.workspace.run_workspace import READY, REMOTE_GIT_DIR, RunWorkspace
from sandbox.workspace.sources import WorkspaceSourceError, check_name, git, resolve_source

SANDBOX_UID = 65534
SANDBOX_GID = 65534
log = logging.getLogger(__name__)
FULL_HASH = re.compile(r"[0-9a-f]{40}")  # a commit named by its (SHA-1) hash, as a run's record pins it
CACHE_DIRS = {"__pycache__", ".pytest_cache", ".mypy_cache", ".ruff_cache", ".hypothesis", ".benchmarks"}


def open_workspace(root: Path) -> RunWorkspace | None:
    return RunWorkspace(root) if (root / READY).is_file() else None


def prepare_workspace(
    root: Path,
    source: WorkspaceSource,
    base_dir: Path,
    allowed_roots: Sequence[Path],
    remotes: RemoteAccess | None = None,
    *,
    commit: str | None = None,
    before_ready: Callable[[RunWorkspace], None] | None = None,
) -> RunWorkspace:
    """Materialise the source under ``root`` (idempotent: a prepared root is reused).
    ``commit`` pins a git or remote source to the commit a run was first prepared at
    (its ref may have moved since); ``before_ready`` finishes the staging workspace
    (a rebuild replays the run's writes there), so a workspace is never ready half-made.
    The source must lie under one of ``allowed_roots``: whoever may start a run must
    not be able to copy arbitrary files of the server into a workspace they can read.
    A remote must be one of ``remotes.allowed``; its clone's git directory is always
    kept (``source.git/`` or ``remote.git/``, never mounted) for publishing.
    Built in a staging directory and renamed into place, so a crash never leaves a
    half-prepared workspace that looks ready."""
    existing = open_workspace(root)
    if existing is not None:
        return existing
    root.parent.mkdir(parents=True, exist_ok=True)
    staging = root.parent / f".{root.name}.staging-{uuid.uuid4().hex[:8]}"
    staging.mkdir()
    try:
        prepared = RunWorkspace(staging, staging=True)
        meta, commit_tree, trusted = _materialise(source, prepared, base_dir, allowed_roots, remotes, commit)
        if trusted is not None:
            # Born the sandbox's, and its tree known without a walk (the commit's, or
            # hashed as it was copied): walked in full before publish and completion,
            # and at every pickup but the one that follows now.
            base = prepared.index.adopt(*trusted)
        else:
            # Checks only read the tree (it is mounted read-only), but a source may hold
            # files only their owner can read: the sandbox's uid owns them.
            _give_to_sandbox(prepared.dir)
            base = prepared.index.start()
        _keep_pristine(prepared, meta, base, commit_tree, remote=source.url is not None)
        if before_ready is not None:
            before_ready(prepared)
        prepared.index.persist()
        (staging / READY).write_text(json.dumps(meta, indent=2))
        try:
            os.rename(staging, root)
        except OSError:
            if open_workspace(root) is None:  # not a concurrent preparation that won
                raise
            shutil.rmtree(staging, ignore_errors=True)
            return RunWorkspace(root)  # made by the other preparation: its pickup reads it in full
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    # Its revision was proven as it was made (walked, hashed as copied, or the
    # commit's own trees), in a staging directory nobody else writes.
    return RunWorkspace(root, made_now=True)


def _materialise(
    source: WorkspaceSource,
    prepared: RunWorkspace,
    base_dir: Path,
    allowed_roots: Sequence[Path],
    remotes: RemoteAccess | None,
    commit: str | None = None,
) -> tuple[dict[str, JSON], str | None, tuple[str, dict[bytes, bytes]] | None]:
    """The source's files in the staging workspace: what the workspace records of
    its source, the root tree of its commit when the preparation read it (else
    None), and the tree when the preparation itself proved it (else None)."""
    meta: dict[str, JSON] = {"kind": source.kind, "ref": source.ref}
    commit_tree: str | None = None
    trusted: tuple[str, dict[bytes, bytes]] | None = None
    if source.url is not None:
        meta.update(url=source.url, commit=_from_remote(source.url, source.ref, prepared, remotes or RemoteAccess(), commit))
        return meta, commit_tree, trusted
    assert source.path is not None  # one of path and url, by WorkspaceSource
    location = resolve_source(source.path, base_dir, allowed_roots)
    meta["path"] = str(location)
    if source.kind == "path" and os.geteuid() == 0:
        prepared.dir.mkdir()
        trusted = Copier(location, CACHE_DIRS, SANDBOX_UID, SANDBOX_GID).copy(prepared.dir, prepared.pristine)
    elif source.kind == "path":  # a worker that cannot give files away copies and opens them
        _copy_tree(location, prepared.dir, skip=CACHE_DIRS)
    elif source.kind == "git":
        meta["commit"], commit_tree, trusted = _from_git(location, commit or source.ref, prepared.dir, prepared.pristine_git)
    else:
        extract_archive(location, prepared.dir)
    return meta, commit_tree, trusted


def _keep_pristine(prepared: RunWorkspace, meta: dict[str, JSON], base: str, commit_tree: str | None, *, remote: bool) -> None:
    """The pristine tree that publishing diffs against: the commit's objects when the
    checkout is the commit's tree (``commit_tree``, asked of git when not known yet),
    else hard links to the workspace's files."""
    if prepared.pristine.is_dir():
        return  # linked as it was copied
    if "commit" in meta and base == (commit_tree or git(["rev-parse", f"{meta['commit']}^{{tree}}"], cwd=prepared.pristine_git)):
        return  # the checkout is the commit's tree: the commit's objects are the pristine tree
    if remote:
        # Not the pristine side, but publishing makes its commit there.
        os.rename(prepared.pristine_git, prepared.root / REMOTE_GIT_DIR)
    else:
        shutil.rmtree(prepared.pristine_git, ignore_errors=True)
    _link_tree(prepared.dir, prepared.pristine)


def _copy_tree(src: Path, dst: Path, skip: set[str]) -> None:
    """Copy without following symlinks; special files and ``.git`` are left out."""
    if not src.is_dir():
        raise WorkspaceSourceError(f"{src} is not a directory")

    def ignore(directory: str, names: list[str]) -> set[str]:
        left_out = set()
        for name in names:
            check_name(os.path.relpath(os.path.join(directory, name), src))
            mode = os.lstat(os.path.join(directory, name)).st_mode
            regular = stat.S_ISREG(mode) or stat.S_ISDIR(mode) or stat.S_ISLNK(mode)
            if not regular or name in skip or (name == ".git" and Path(directory) == src):
                left_out.add(name)
        return left_out

    shutil.copytree(src, dst, symlinks=True, ignore=ignore)


def _link_tree(src: Path, dst: Path) -> None:
    """``dst`` as hard links to ``src``'s files (their data is not copied): the tree
    was just made by trusted code and holds only directories, files and symlinks."""
    for dirpath, dirnames, filenames in os.walk(src):
        target = dst / os.path.relpath(dirpath, src)
        target.mkdir(exist_ok=True)
        for name in dirnames + filenames:
            full = os.path.join(dirpath, name)
            if os.path.islink(full):
                os.symlink(os.readlink(full), target / name)
                if name in dirnames:
                    dirnames.remove(name)  # os.walk would not descend, but say it
            elif name in filenames:
                os.link(full, target / name)


def _give_to_sandbox(tree: Path) -> None:
    """The checks run as uid 65534 and may need to write (build outputs, fixtures)."""
    try:
        for dirpath, dirnames, filenames in os.walk(tree):
            os.lchown(dirpath, SANDBOX_UID, SANDBOX_GID)
            for name in dirnames + filenames:
                os.lchown(os.path.join(dirpath, name), SANDBOX_UID, SANDBOX_GID)
    except PermissionError:
        # A worker that is not root cannot chown; open the tree to the sandbox user
        # instead (the workspace holds only the task's own files).
        for dirpath, _dirnames, filenames in os.walk(tree):
            os.chmod(dirpath, 0o777)  # noqa: S103
            for name in filenames:
                full = os.path.join(dirpath, name)
                if not os.path.islink(full):
                    os.chmod(full, os.stat(full).st_mode | 0o666)  # noqa: S103


def _from_git(location: Path, ref: str | None, dest: Path, git_dir: Path) -> tuple[str, str, tuple[str, dict[bytes, bytes]] | None]:
    """The commit checked out, its root tree, and that tree with its tree objects
    when the checkout is proven to be that tree without a walk
    (``sandbox/workspace/checkout.py``; None: it must be walked, and handed to the
    sandbox's uid)."""
    if not (location / ".git").exists() and not (location / "HEAD").is_file():
        raise WorkspaceSourceError(f"{location} is not a local git repository")
    if ref is not None and (ref.startswith("-") or any(c.isspace() or ord(c) < 32 for c in ref)):
        raise WorkspaceSourceError(f"{ref!r} is not a valid git ref", field="workspace.ref")
    # The source's objects hard-linked (git never changes an object file), the commit
    # checked out once; the git directory is kept out of the workspace.
    linked = ref is not None and FULL_HASH.fullmatch(ref) is not None and _linked_objects(location, git_dir, ref)
    if linked:
        dest.mkdir()
    else:
        git(["clone", "--quiet", "--local", "--no-checkout", "--", str(location), str(dest)])
        os.rename(dest / ".git", git_dir)
    with checkout.GitObjects(git_dir) as objects:
        commit, tree = _named_commit(objects, ref, location)
        # The commit's trees are read and checked (Python, here); a large tree's files
        # are written meanwhile by git (its own process): on two cores that is the
        # clone (or the links) plus the longer of the two, not their sum. A tree found
        # untrusted ends the checkout made meanwhile, which is emptied again.
        try:
            try:
                trusted = checkout.check_out(objects, commit, tree, dest, SANDBOX_UID, SANDBOX_GID)
            except checkout.NotTrusted:
                checkout.empty(dest)
                raise
            return commit, tree, trusted
        except checkout.NotTrusted as exc:
            log.info("%s at %s is checked out and walked: %s", location, commit, exc)
    os.rename(git_dir, dest / ".git")
    git(["checkout", "--quiet", "--detach", commit], cwd=dest)
    os.rename(dest / ".git", git_dir)
    return commit, tree, None


def _named_commit(objects: checkout.GitObjects, ref: str | None, location: Path) -> tuple[str, str]:
    """The commit ``ref`` names (HEAD when None) and its root tree."""
    try:
        named = objects.commit(ref or "HEAD")
    except checkout.NotTrusted:
        named = None
    if named is None:
        raise WorkspaceSourceError(f"ref {ref or 'HEAD'!r} is not a commit in {location}", field="workspace.ref")
    return named


class _NotLinked(Exception):
    """The source's objects are not all plain files of its own objects directory."""


def _linked_objects(location: Path, git_dir: Path, commit: str) -> bool:
    """A git directory holding the source's objects, hard-linked as ``git clone
    --local`` links them, with ``commit`` as its HEAD: all a commit named by its hash
    needs (the source's refs name nothing it needs). False, and nothing made, where
    the objects are not all plain files of the source's own directory (a ``.git``
    file, alternates, a symlink) or cannot be linked: the clone decides those, as it
    always did."""
    source_git = location / ".git" if (location / ".git").exists() else location
    objects = source_git / "objects"
    try:
        if (
            not stat.S_ISDIR(os.lstat(source_git).st_mode)
            or not stat.S_ISDIR(os.lstat(objects).st_mode)
            or (source_git / "commondir").exists()
            or (objects / "info" / "alternates").exists()
        ):
            return False
        (git_dir / "refs").mkdir(parents=True)
        (git_dir / "HEAD").write_text(commit + "\n")
        _link_objects(os.fspath(objects), os.fspath(git_dir / "objects"))
    except (OSError, _NotLinked):
        shutil.rmtree(git_dir, ignore_errors=True)
        return False
    return True


def _link_objects(src: str, dst: str) -> None:
    os.mkdir(dst)
    with os.scandir(src) as entries:
        for entry in entries:
            if entry.is_dir(follow_symlinks=False):
                _link_objects(entry.path, f"{dst}/{entry.name}")
            elif entry.is_file(follow_symlinks=False):
                os.link(entry.path, f"{dst}/{entry.name}", follow_symlinks=False)
            else:
                raise _NotLinked(entry.path)  # git clone --local refuses a symlink there too


def _from_remote(url: str, ref: str | None, prepared: RunWorkspace, access: RemoteAccess, pinned: str | None = None) -> str:
    # Cloned like a local git source: its git directory moves out of the workspace.
    commit = remote.clone(url, ref, prepared.dir, access)
    if pinned is not None and commit != pinned:
        # The ref moved on since the run was first prepared: the pinned commit itself,
        # which needs the history (RemoteError when the remote no longer has it).
        shutil.rmtree(prepared.dir)
        commit = remote.clone(url, pinned, prepared.dir, access)
    os.rename(prepared.dir / ".git", prepared.pristine_git)
    return commit
