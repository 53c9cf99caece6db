"""A run's workspace on the worker host, and its revision.

Layout under ``WORKSPACE_ROOT/<run_id>/``::

    workspace/    mounted at /workspace in the run's container (owned by uid 65534)
    source.git/   from a git source or remote: the clone's objects (hard links to a
                  local source's), never mounted; publish diffs against the commit
    remote.git/   from a git remote whose checkout differs from its commit: the
                  clone's git directory, kept only for pushing, never mounted
    pristine/     from any other source (or a checkout that differs from its
                  commit): hard links to the workspace's files as prepared. The
                  harness's tools replace a file by renaming a new one over it, so
                  the pristine inode keeps its content
    index/        the revision's tree objects (``sandbox/revision.py``)
    source.json   where it came from (kind, path or url, ref, commit)

No file's data is copied twice. Every read of the pristine side is checked against
the blob hash the base revision records. The revision is the git tree hash of
``workspace/``'s contents (``sandbox/hashing.py``), kept current along the paths the
harness's own tools write."""

from __future__ import annotations

import json
import logging
import os
import posixpath
import shutil
import stat
import subprocess
import tarfile
import time
import uuid
import zipfile
from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path

from runs.core.contract import WorkspaceSource
from runs.core.errors import FieldProblem, InputError
from runs.core.jsonutil import JSON
from runs.core.paths import PathRefused, canonical_path, path_allowed, refused_character, shown_path
from runs.core.ports import RevisionMismatch
from runs.environment import RepositoryContext
from sandbox import fileops, patches, remote
from sandbox.hashing import EMPTY_TREE, LINK_MODE, TreeHasher, content, git_hash
from sandbox.remote import RemoteAccess
from sandbox.revision import WHOLE_TREE, RevisionIndex

__all__ = ["EMPTY_TREE", "RunWorkspace", "TreeHasher", "prepare_workspace"]

log = logging.getLogger(__name__)

SANDBOX_UID = 65534
SANDBOX_GID = 65534
READY = "source.json"
REMOTE_GIT_DIR = "remote.git"
MAX_ARCHIVE_BYTES = 2_000_000_000
MAX_ARCHIVE_MEMBERS = 200_000
CACHE_DIRS = {"__pycache__", ".pytest_cache", ".mypy_cache", ".ruff_cache", ".hypothesis", ".benchmarks"}
# What a model's first message shows of the repository (the adapters cap it again).
INSTRUCTION_FILES = ("AGENTS.md", "CONTRIBUTING.md", "README.md")
CONTEXT_MAX_LISTED = 300
CONTEXT_MAX_SOURCES = 12
CONTEXT_MAX_SOURCE_BYTES = 32_000


class WorkspaceSourceError(InputError):
    def __init__(self, message: str, field: str = "workspace.path") -> None:
        super().__init__("workspace", [FieldProblem(field, message)])


# -- the workspace -----------------------------------------------------------------


@dataclass(frozen=True)
class Change:
    path: str
    old: bytes | None
    new: bytes | None
    old_kind: str | None = None  # "file" or "other" (symlink, special file); None: absent
    new_kind: str | None = None


@dataclass(frozen=True)
class PatchSet:
    text: str
    files: list[str]
    skipped: list[dict[str, str]]


class RunWorkspace:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.dir = root / "workspace"
        self.pristine = root / "pristine"
        self.pristine_git = root / "source.git"
        self._hasher = TreeHasher()
        self.index = RevisionIndex(root / "index", self.dir, self._hasher)

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

    def reread(self) -> str:
        """After something other than the harness's tools changed the tree: the full
        walk's value becomes the revision."""
        return self.index.rebuild()

    # -- the only writers -------------------------------------------------------------

    def write_file(self, path: str, text: str) -> dict[str, object]:
        with self.index.writing([path]):
            return fileops.write_file(self.dir, path, text)

    def apply_patch(self, patch_text: str) -> dict[str, object]:
        planned = fileops.plan_patch(self.dir, patch_text)
        with self.index.writing([change.path for change in planned]):
            return fileops.apply_planned(self.dir, planned)

    def untrusted_code(self) -> AbstractContextManager[None]:
        """Around a check: code the harness does not control, which sees the workspace
        through a mount its container proves read-only, so nothing is walked after it
        (a crash inside has the next worker walk the tree)."""
        return self.index.writing([WHOLE_TREE])

    def preview(self, tool: str, args: Mapping[str, JSON]) -> str | None:
        """What a file tool would change, as a unified diff against the current content
        (``publish`` is previewed by ``sandbox.publishing``)."""
        try:
            if tool == "write_file":
                path = str(args["path"])
                current = fileops.read_bytes(self.dir, path)
                new = str(args["content"])
                if current is not None and fileops.is_binary(current):
                    return f"# {path} is a binary file; write_file replaces it with {len(new.encode())} bytes of text\n"
                old = None if current is None else fileops.decode(current)
                return patches.unified_diff(path, old, new)
            if tool == "apply_patch":
                planned = fileops.plan_patch(self.dir, str(args["patch"]))
                return "".join(patches.unified_diff(c.path, c.old, c.new) for c in planned)
        except (fileops.FileRefused, patches.PatchRefused) as exc:
            return f"# this {tool} would be refused: {exc}\n"
        return None

    def repository_context(self, write_paths: Sequence[str], allowed_tools: Sequence[str]) -> RepositoryContext:
        """The repository's instructions (the first of INSTRUCTION_FILES present) and
        the text files the run may write, if the run may read files, and its file list,
        if it may list them: read the way those tools read, never through a symlink."""
        readable = "read_file" in allowed_tools
        instructions = next((text for name in INSTRUCTION_FILES if (text := self._text(name))), None) if readable else None
        listing = fileops.list_files(self.dir, "", CONTEXT_MAX_LISTED)
        files: list[str] = listing["files"]
        state = None
        if "list_files" in allowed_tools:
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
            data = _git_output(["cat-file", "blob", sha.hex()], cwd=self.pristine_git)
        except WorkspaceSourceError as exc:
            raise RevisionMismatch(f"the source's {path} cannot be read from its git objects: {exc}") from None
        if entry is None or git_hash(b"blob", data) != sha:
            raise RevisionMismatch(f"the source's {path} is not what the base revision records")
        return ("other", b"") if entry[0] == LINK_MODE else ("file", data)

    def diff(self) -> PatchSet:
        """The workspace's changes as a patch ``git apply``/``patch -p1`` accept.
        Binary files and symlinks cannot be expressed and are listed as skipped; a
        path outside the path grammar refuses the whole diff (PatchRefused)."""
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
            text.append(patches.unified_diff(change.path, old, new))
            files.append(change.path)
        return PatchSet("".join(text), files, skipped)


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


# -- preparation ---------------------------------------------------------------------


def open_workspace(root: Path) -> RunWorkspace | None:
    return RunWorkspace(root) if (root / READY).is_file() else None


def prepare_workspace(
    root: Path,
    source: WorkspaceSource,
    base_dir: Path,
    allowed_roots: Sequence[Path],
    remotes: RemoteAccess | None = None,
) -> RunWorkspace:
    """Materialise the source under ``root`` (idempotent: a prepared root is reused).
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
        meta: dict[str, JSON] = {"kind": source.kind, "ref": source.ref}
        prepared = RunWorkspace(staging)
        if source.url is not None:
            meta.update(url=source.url, commit=_from_remote(source.url, source.ref, prepared, remotes or RemoteAccess()))
        else:
            assert source.path is not None  # one of path and url, by WorkspaceSource
            location = _resolve(source.path, base_dir, allowed_roots)
            meta["path"] = str(location)
            if source.kind == "path":
                _copy_tree(location, prepared.dir, skip=CACHE_DIRS)
            elif source.kind == "git":
                meta["commit"] = _from_git(location, source.ref, prepared.dir, prepared.pristine_git)
            else:
                _from_archive(location, prepared.dir)
        # Checks only read the tree (it is mounted read-only), but a source may hold
        # files only their owner can read: the sandbox's uid owns them.
        _give_to_sandbox(prepared.dir)
        base = prepared.index.start()
        if "commit" in meta and base == _git(["rev-parse", f"{meta['commit']}^{{tree}}"], cwd=prepared.pristine_git):
            pass  # the full walk verified the checkout: the commit's objects are the pristine tree
        else:
            if source.url is not None:
                # Not the pristine side, but publishing makes its commit there.
                os.rename(prepared.pristine_git, staging / REMOTE_GIT_DIR)
            else:
                shutil.rmtree(prepared.pristine_git, ignore_errors=True)
            _link_tree(prepared.dir, prepared.pristine)
        (staging / READY).write_text(json.dumps(meta, indent=2))
        try:
            os.rename(staging, root)
        except OSError:
            if open_workspace(root) is None:  # not a concurrent preparation that won
                raise
            shutil.rmtree(staging, ignore_errors=True)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return RunWorkspace(root)


def check_source(
    source: WorkspaceSource, base_dir: Path, allowed_roots: Sequence[Path], allowed_remotes: Sequence[str] = ()
) -> None:
    """WorkspaceSourceError (RemoteError for a remote) unless the source is allowed and
    exists; reads only, so the process creating a run (the web server, unprivileged)
    can refuse a bad source at once while the worker that drives the run prepares the
    workspace. A remote is checked against the allowed list, not contacted."""
    if source.url is not None:
        remote.check_remote_url(source.url, allowed_remotes)
        remote.check_ref(source.ref)
        return
    assert source.path is not None  # one of path and url, by WorkspaceSource
    location = _resolve(source.path, base_dir, allowed_roots)
    exists = location.is_file() if source.kind == "archive" else location.is_dir()
    if not exists:
        raise WorkspaceSourceError(f"{source.path} is not {'a file' if source.kind == 'archive' else 'a directory'}")


def _resolve(path: str, base_dir: Path, allowed_roots: Sequence[Path]) -> Path:
    candidate = Path(path)
    if not candidate.is_absolute():
        candidate = base_dir / candidate
    candidate = candidate.resolve()
    roots = [Path(r).resolve() for r in allowed_roots]
    if not any(candidate.is_relative_to(r) for r in roots):
        allowed = ", ".join(str(r) for r in roots)
        raise WorkspaceSourceError(f"{path} is outside the allowed workspace sources ({allowed}; see HARNESS_WORKSPACE_SOURCES)")
    return candidate


def _copy_tree(src: Path, dst: Path, skip: set[str]) -> None:
    """Copy without following symlinks; special files and ``.git`` are left out."""
    if not src.is_dir():
        raise WorkspaceSourceError(f"{src} is not a directory")

    def ignore(directory: str, names: list[str]) -> set[str]:
        left_out = set()
        for name in names:
            _check_name(os.path.relpath(os.path.join(directory, name), src))
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


def _check_name(path: str) -> None:
    """A file name in a source obeys the path grammar, or the source is refused."""
    why = refused_character(path)
    if why is not None:
        raise WorkspaceSourceError(f"the source has a file {shown_path(path)} that {why}; such names are refused")


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


def _git(args: list[str], cwd: Path | None = None) -> str:
    return _git_output(args, cwd).decode(errors="replace").strip()


def _git_output(args: list[str], cwd: Path | None = None) -> bytes:
    # Bytes (a blob is not text), in the same isolated environment as remote git.
    env = remote.git_environment(RemoteAccess(), "file")
    done = subprocess.run(["git", *args], cwd=cwd, env=env, capture_output=True, timeout=300)
    if done.returncode != 0:
        raise WorkspaceSourceError(f"git {args[0]} failed: {done.stderr.decode(errors='replace').strip()[:500]}")
    return done.stdout


def _from_git(location: Path, ref: str | None, dest: Path, git_dir: Path) -> str:
    if not (location / ".git").exists() and not (location / "HEAD").is_file():
        raise WorkspaceSourceError(f"{location} is not a local git repository")
    if ref is not None and (ref.startswith("-") or any(c.isspace() or ord(c) < 32 for c in ref)):
        raise WorkspaceSourceError(f"{ref!r} is not a valid git ref", field="workspace.ref")
    # A local clone hard-links the source's objects (git never changes an object file)
    # and checks the commit out once; its .git then moves out of the workspace.
    _git(["clone", "--quiet", "--local", "--no-checkout", "--", str(location), str(dest)])
    try:
        commit = _git(["rev-parse", "--verify", "--quiet", f"{ref or 'HEAD'}^{{commit}}"], cwd=dest)
    except WorkspaceSourceError:
        raise WorkspaceSourceError(f"ref {ref or 'HEAD'!r} is not a commit in {location}", field="workspace.ref") from None
    _git(["checkout", "--quiet", "--detach", commit], cwd=dest)
    os.rename(dest / ".git", git_dir)
    return commit


def _from_remote(url: str, ref: str | None, prepared: RunWorkspace, access: RemoteAccess) -> str:
    # Cloned like a local git source: its git directory moves out of the workspace.
    commit = remote.clone(url, ref, prepared.dir, access)
    os.rename(prepared.dir / ".git", prepared.pristine_git)
    return commit


def _archive_member_path(name: str) -> str:
    clean = name[2:] if name.startswith("./") else name
    clean = clean.rstrip("/")
    _check_name(clean)
    if not clean or clean.startswith("/") or "\\" in clean or "\x00" in clean:
        raise WorkspaceSourceError(f"archive member {name!r}: absolute or malformed path")
    if any(part == ".." for part in clean.split("/")):
        raise WorkspaceSourceError(f"archive member {name!r}: '..' would leave the workspace")
    return posixpath.normpath(clean)


def _from_archive(location: Path, dest: Path) -> None:
    if not location.is_file():
        raise WorkspaceSourceError(f"{location} is not a file")
    name = location.name.lower()
    dest.mkdir()
    if name.endswith(".zip"):
        _extract_zip(location, dest)
    elif name.endswith((".tar", ".tar.gz", ".tgz", ".tar.bz2", ".tar.xz")):
        _extract_tar(location, dest)
    else:
        raise WorkspaceSourceError(f"{location.name}: archives must be .zip, .tar, .tar.gz, .tgz, .tar.bz2 or .tar.xz")


def _extract_tar(location: Path, dest: Path) -> None:
    try:
        archive = tarfile.open(location, "r:*")
    except (tarfile.TarError, OSError) as exc:
        raise WorkspaceSourceError(f"{location.name}: not a readable tar archive ({exc})") from None
    with archive:
        members: list[tarfile.TarInfo] = []
        total = 0
        for member in archive:
            path = _archive_member_path(member.name)
            if path == "." or path == ".git" or path.startswith(".git/"):
                continue
            if member.islnk():
                raise WorkspaceSourceError(f"archive member {member.name!r}: hard links are refused")
            if member.issym():
                target = member.linkname
                joined = posixpath.normpath(posixpath.join(posixpath.dirname(path), target))
                if target.startswith("/") or joined == ".." or joined.startswith("../"):
                    raise WorkspaceSourceError(f"archive member {member.name!r}: symlink to {target!r} leaves the workspace")
            elif not (member.isfile() or member.isdir()):
                raise WorkspaceSourceError(f"archive member {member.name!r}: devices and FIFOs are refused")
            total += member.size
            if total > MAX_ARCHIVE_BYTES or len(members) >= MAX_ARCHIVE_MEMBERS:
                raise WorkspaceSourceError(f"{location.name}: larger than {MAX_ARCHIVE_BYTES} bytes or {MAX_ARCHIVE_MEMBERS} members")
            members.append(member)
        try:
            # The "data" filter re-checks every member (and drops setuid bits) on
            # top of the checks above.
            archive.extractall(dest, members=members, filter="data")
        except (tarfile.TarError, OSError) as exc:
            raise WorkspaceSourceError(f"{location.name}: refused while extracting ({exc})") from None


def _extract_zip(location: Path, dest: Path) -> None:
    try:
        archive = zipfile.ZipFile(location)
    except (zipfile.BadZipFile, OSError) as exc:
        raise WorkspaceSourceError(f"{location.name}: not a readable zip archive ({exc})") from None
    with archive:
        infos = archive.infolist()
        if len(infos) > MAX_ARCHIVE_MEMBERS or sum(i.file_size for i in infos) > MAX_ARCHIVE_BYTES:
            raise WorkspaceSourceError(f"{location.name}: larger than {MAX_ARCHIVE_BYTES} bytes or {MAX_ARCHIVE_MEMBERS} members")
        budget = MAX_ARCHIVE_BYTES
        for info in infos:
            path = _archive_member_path(info.filename)
            if path == "." or path == ".git" or path.startswith(".git/"):
                continue
            if stat.S_IFMT(info.external_attr >> 16) == stat.S_IFLNK:
                raise WorkspaceSourceError(f"archive member {info.filename!r}: symlinks in zip archives are refused")
            try:
                budget = _extract_zip_member(archive, info, dest / path, budget)
            except (OSError, zipfile.BadZipFile) as exc:
                raise WorkspaceSourceError(f"archive member {info.filename!r}: {exc}") from None
            if budget < 0:
                raise WorkspaceSourceError(f"{location.name}: inflates to more than {MAX_ARCHIVE_BYTES} bytes")


def _extract_zip_member(archive: zipfile.ZipFile, info: zipfile.ZipInfo, target: Path, budget: int) -> int:
    if info.is_dir():
        target.mkdir(parents=True, exist_ok=True)
        return budget
    target.parent.mkdir(parents=True, exist_ok=True)
    with archive.open(info) as src, open(target, "xb") as out:
        # Declared sizes can lie; count what is actually inflated.
        while block := src.read(1 << 20):
            budget -= len(block)
            if budget < 0:
                return budget
            out.write(block)
    if (info.external_attr >> 16) & stat.S_IXUSR:
        target.chmod(0o755)
    return budget
