"""A run's workspace on the worker host, and its revision.

Layout under ``WORKSPACE_ROOT/<run_id>/``::

    workspace/    mounted at /workspace in the run's container (owned by uid 65534)
    source.git/   from a git source or remote: the clone's objects (hard links to a
                  local source's, linked without a clone for a commit named by its
                  hash), never mounted; publish diffs against the commit
    remote.git/   from a git remote whose checkout differs from its commit: the
                  clone's git directory, kept only for pushing, never mounted
    pristine/     from any other source (or a checkout that differs from its
                  commit): hard links to the workspace's files as prepared. The
                  harness's tools replace a file by renaming a new one over it, so
                  the pristine inode keeps its content
    index/        the revision's tree objects (``sandbox/workspace/revision.py``)
    source.json   where it came from (kind, path or url, ref, commit)

No file's data is copied twice. Every read of the pristine side is checked against
the blob hash the base revision records. The revision is the git tree hash of
``workspace/``'s contents (``sandbox/workspace/hashing.py``), kept current along the paths the
harness's own tools write.

The workspace is made by ``sandbox.workspace.preparation`` from a source ``sandbox.workspace.sources``
checked (archives unpacked by ``sandbox.workspace.archives``)."""

from __future__ import annotations

import json
import logging
import os
import stat
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path

from core.environment import RepositoryContext
from core.jsonutil import JSON
from core.paths import PathRefused, canonical_path, path_allowed
from core.ports import RevisionMismatch
from core.tools import builtin_registry
from sandbox.workspace import fileops, patches
from sandbox.workspace.hashing import LINK_MODE, TreeHasher, content, git_hash
from sandbox.workspace.revision import WHOLE_TREE, RevisionIndex
from sandbox.workspace.sources import WorkspaceSourceError, git_output

log = logging.getLogger(__name__)

READY = "source.json"
REMOTE_GIT_DIR = "remote.git"
# What a model's first message shows of the repository (the adapters cap it again).
INSTRUCTION_FILES = ("AGENTS.md", "CONTRIBUTING.md", "README.md")
CONTEXT_MAX_LISTED = 300
CONTEXT_MAX_SOURCES = 12
CONTEXT_MAX_SOURCE_BYTES = 32_000


@dataclass(frozen=True)
class Change:
    path: str
    old: bytes | None
    new: bytes | None
    old_kind: str | None = None  # "file" or "other" (symlink, special file); None: absent
    new_kind: str | None = None


@dataclass(frozen=True)
class PatchSet:
    diffs: list[str]  # one per file of ``files``, in order
    files: list[str]
    skipped: list[dict[str, str]]

    @property
    def text(self) -> str:
        return "".join(self.diffs)


class RunWorkspace:
    def __init__(self, root: Path, *, made_now: bool = False, staging: bool = False) -> None:
        self.root = root
        # Made by this process just now (``prepare_workspace``) and not written or
        # run in since: the pickup that follows need not read it again.
        self._made_now = made_now
        self.dir = root / "workspace"
        self.pristine = root / "pristine"
        self.pristine_git = root / "source.git"
        self._hasher = TreeHasher()
        # ``staging``: being made in a staging directory (``prepare_workspace``), whose
        # index needs no protection from a crash (``RevisionIndex``).
        self.index = RevisionIndex(root / "index", self.dir, self._hasher, staging=staging)

    @property
    def remote_git(self) -> Path:
        """For a workspace cloned from a remote: the git directory pushes are made in."""
        return self.pristine_git if self.pristine_git.is_dir() else self.root / REMOTE_GIT_DIR

    @property
    def source(self) -> dict[str, JSON]:
        loaded: dict[str, JSON] = json.loads((self.root / READY).read_text())
        return loaded

    def revision(self) -> str:
        """The maintained revision (no walk); RevisionMismatch once it failed its
        verification."""
        try:
            return self.index.head()
        except (fileops.FileRefused, OSError, RecursionError) as exc:
            # A tree trusted code cannot read (nesting a check created to exhaust
            # fds, say) gets a revision equal to no other, not even the next call's:
            # the harness then refuses receipts against it and no evidence is ever
            # current, so the run stops instead of vouching for unseen content.
            log.warning("workspace %s cannot be hashed: %s", self.dir, exc)
            return f"unhashable-{time.time_ns():x}"

    def base_revision(self) -> str:
        return self.index.base(self.pristine)

    def verify(self) -> str:
        """A full walk that must agree with the maintained revision (or RevisionMismatch)."""
        return self.index.verify()

    def picked_up(self) -> str:
        """What a worker relies on as it picks the run up (``core.ports.Workspace``):
        the maintained revision once, right after this process made the workspace,
        else (and ever after) a full walk. Whatever changed the tree meanwhile
        without the harness's tools (nothing can: it was made in a staging directory
        renamed into place, and containers mount it read-only) is found by the full
        walk before publish and before the run completes."""
        if self._made_now:
            self._made_now = False
            return self.revision()
        return self.verify()

    def reread(self) -> str:
        """After something other than the harness's tools changed the tree: the full
        walk's value becomes the revision."""
        self._made_now = False
        return self.index.rebuild()

    # -- the only writers -------------------------------------------------------------

    def write_file(self, path: str, text: str) -> dict[str, object]:
        self._made_now = False
        with self.index.writing([path]):
            return fileops.write_file(self.dir, path, text)

    def apply_patch(self, patch_text: str) -> dict[str, object]:
        self._made_now = False
        planned = fileops.plan_patch(self.dir, patch_text)
        with self.index.writing([change.path for change in planned]):
            return fileops.apply_planned(self.dir, planned)

    def untrusted_code(self) -> AbstractContextManager[None]:
        """Around a check: code the harness does not control, which sees the workspace
        through a mount its container proves read-only, so nothing is walked after it
        (a crash inside has the next worker walk the tree)."""
        self._made_now = False
        return self.index.writing([WHOLE_TREE])

    def repository_context(self, write_paths: Sequence[str], allowed_tools: Sequence[str]) -> RepositoryContext:
        """The repository's instructions (the first of INSTRUCTION_FILES present) and
        the text files the run may write, if the run may read files, and its file list,
        if it may list them: read the way those tools read, never through a symlink."""
        shown = {spec.shows for spec in builtin_registry().visible(allowed_tools)}
        readable = "file_contents" in shown
        instructions = next((text for name in INSTRUCTION_FILES if (text := self._text(name))), None) if readable else None
        listing = fileops.list_files(self.dir, "", CONTEXT_MAX_LISTED)
        files: list[str] = listing["files"]
        state = None
        if "file_list" in shown:
            state = "Files in the workspace:\n" + "\n".join(files)
            if listing["symlinks"]:
                state += "\nSymlinks (the file tools do not follow them):\n" + "\n".join(listing["symlinks"])
            if listing["truncated"]:
                state += f"\n(the first {CONTEXT_MAX_LISTED} entries; list_files shows the rest)"
        writable = [f for f in files if path_allowed(f, write_paths)][:CONTEXT_MAX_SOURCES] if readable else []
        sources = tuple((path, text) for path in writable if (text := self._text(path)) is not None)
        return RepositoryContext(instructions=instructions, state=state, sources=sources)

    def _text(self, path: str) -> str | None:
        """A small text file's content; None for anything else."""
        try:
            data = fileops.read_bytes(self.dir, path, CONTEXT_MAX_SOURCE_BYTES)
        except fileops.FileRefused:
            return None
        return None if data is None or fileops.is_binary(data) else fileops.decode(data)

    def changes(self) -> list[Change]:
        """Files that differ from the pristine source (content or kind), found by
        comparing the base and current trees: only the trees that differ are read."""
        head = self.revision()
        if head.startswith("unhashable-"):
            raise fileops.FileRefused("the workspace cannot be hashed, so its changes cannot be shown")
        out = []
        for path, old_sha, new_sha in self.index.changes(self.base_revision(), head):
            if ".git" in path.split("/"):
                continue  # never published, like everything the file tools cannot reach
            old_kind, old = self._pristine_side(path, old_sha)
            new_kind, new = _side(self.dir, path, new_sha)
            out.append(Change(path, old, new, old_kind, new_kind))
        return out

    def _pristine_side(self, path: str, sha: bytes | None) -> tuple[str | None, bytes | None]:
        if sha is None or not self.pristine_git.is_dir():
            return _side(self.pristine, path, sha)
        entry = self.index.entry(self.base_revision(), path)
        try:
            data = git_output(["cat-file", "blob", sha.hex()], cwd=self.pristine_git)
        except WorkspaceSourceError as exc:
            raise RevisionMismatch(f"the source's {path} cannot be read from its git objects: {exc}") from None
        if entry is None or git_hash(b"blob", data) != sha:
            raise RevisionMismatch(f"the source's {path} is not what the base revision records")
        return ("other", b"") if entry[0] == LINK_MODE else ("file", data)

    def diff(self, cancelled: Callable[[], bool] | None = None) -> PatchSet:
        """The workspace's changes as a patch ``git apply``/``patch -p1`` accept.
        Binary files and symlinks cannot be expressed and are listed as skipped; a
        path outside the path grammar refuses the whole diff (PatchRefused); a kill
        (``cancelled``) ends it with DiffCancelled."""
        text: list[str] = []
        files: list[str] = []
        skipped: list[dict[str, str]] = []
        for change in self.changes():
            try:
                canonical_path(change.path)  # a name found in the tree obeys the grammar too
            except PathRefused as exc:
                raise patches.PatchRefused(str(exc)) from None
            kinds = {change.old_kind or "file", change.new_kind or "file"}
            if kinds != {"file"}:
                skipped.append({"path": change.path, "reason": "symlinks and special files are not published"})
                continue
            if any(side is not None and fileops.is_binary(side) for side in (change.old, change.new)):
                skipped.append({"path": change.path, "reason": "binary content is not published"})
                continue
            old = None if change.old is None else fileops.decode(change.old)
            new = None if change.new is None else fileops.decode(change.new)
            text.append(patches.unified_diff(change.path, old, new, cancelled=cancelled))
            files.append(change.path)
        return PatchSet(text, files, skipped)


def _side(root: Path, path: str, sha: bytes | None) -> tuple[str | None, bytes | None]:
    """(kind, content) of ``path`` under ``root``, which must hash to ``sha``: a diff
    shows exactly the revisions it names, or nothing."""
    if sha is None:
        return None, None
    parts = path.split("/")
    try:
        with fileops.opened_root(root) as root_fd, fileops.opened_dir(root_fd, parts[:-1]) as dir_fd:
            st = os.stat(parts[-1], dir_fd=dir_fd, follow_symlinks=False)
            data = content(dir_fd, parts[-1], st)
    except (fileops.FileRefused, OSError) as exc:
        raise RevisionMismatch(f"{root.name}/{path} cannot be read as its revision records it: {exc}") from None
    if git_hash(b"blob", data) != sha:
        raise RevisionMismatch(f"{root.name}/{path} no longer has the content its revision records")
    if stat.S_ISREG(st.st_mode):
        return "file", data
    return "other", b""
