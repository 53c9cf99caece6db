"""A run's workspace on the worker host, and its revision.

Layout under ``WORKSPACE_ROOT/<run_id>/``::

    workspace/    mounted at /workspace in the run's container (owned by uid 65534)
    pristine/     the source as prepared, never mounted: publish diffs against it
    source.json   where it came from (kind, path or url, ref, commit)
    remote.git/   for a git remote: the clone's git directory, never mounted

The revision is the git tree hash of ``workspace/``'s contents, computed here in
Python from directory fds. No git process, index or ``.gitignore``/
``.gitattributes``/nested-repository rule can be influenced by the agent, and it is
the same value ``git add -A && git write-tree`` gives for an ordinary tree (files,
executable bits, symlinks; empty directories omitted). Unlike git it also covers
anything named ``.git`` inside the workspace, so nothing can hide there."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import posixpath
import shutil
import stat
import tarfile
import time
import uuid
import zipfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from runs.core.contract import WorkspaceSource
from runs.core.errors import FieldProblem, InputError
from runs.core.jsonutil import JSON
from runs.core.paths import path_allowed
from runs.environment import RepositoryContext
from sandbox import fileops, patches, remote
from sandbox.remote import RemoteAccess

log = logging.getLogger(__name__)

SANDBOX_UID = 65534
SANDBOX_GID = 65534
READY = "source.json"
REMOTE_GIT_DIR = "remote.git"
EMPTY_TREE = "4b825dc642cb6eb9a060e54bf8d69288fbee4904"
# A file changed within this window of a hash may change again within the same
# timestamp tick; it is re-read until it is older (git's "racy clean" problem).
RACY_NS = 1_000_000_000
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


# -- revision --------------------------------------------------------------------

BlobKey = tuple[str, int, int, int, int, int, int]


class TreeHasher:
    """Git tree hashes with a blob cache keyed on (path, inode, size, mtime, ctime,
    mode). ctime cannot be set from user space, so resetting mtime after an edit
    does not hide the edit."""

    def __init__(self, racy_ns: int = RACY_NS) -> None:
        self.racy_ns = racy_ns
        self._blobs: dict[BlobKey, bytes] = {}

    def tree(self, root: Path) -> str:
        started = time.time_ns()
        seen: dict[BlobKey, bytes] = {}
        with fileops.opened_root(root) as fd:
            digest = self._tree(fd, "", 0, started, seen)
        self._blobs = seen
        return digest.hex() if digest is not None else EMPTY_TREE

    def _tree(self, dir_fd: int, prefix: str, depth: int, started: int, seen: dict[BlobKey, bytes]) -> bytes | None:
        entries: list[tuple[bytes, bytes, bytes]] = []  # (sort key, mode, sha)
        for name, st in fileops.stat_entries(dir_fd, prefix, depth):
            raw = os.fsencode(name)
            path = prefix + name
            if stat.S_ISDIR(st.st_mode):
                child = os.open(name, fileops.DIR_FLAGS, dir_fd=dir_fd)
                try:
                    sub = self._tree(child, path + "/", depth + 1, started, seen)
                finally:
                    os.close(child)
                if sub is not None:
                    entries.append((raw + b"/", b"40000", sub))
                continue
            key: BlobKey = (path, st.st_ino, st.st_dev, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_mode)
            sha = self._blobs.get(key)
            if sha is None:
                sha = _git_hash(b"blob", self._content(dir_fd, name, st))
            if st.st_ctime_ns < started - self.racy_ns and st.st_mtime_ns < started - self.racy_ns:
                seen[key] = sha
            if stat.S_ISLNK(st.st_mode):
                mode = b"120000"
            elif stat.S_ISREG(st.st_mode):
                mode = b"100755" if st.st_mode & stat.S_IXUSR else b"100644"
            else:
                mode = b"100644"
            entries.append((raw, mode, sha))
        if not entries:
            return None
        entries.sort(key=lambda e: e[0])
        body = b"".join(mode + b" " + key.rstrip(b"/") + b"\0" + sha for key, mode, sha in entries)
        return _git_hash(b"tree", body)

    @staticmethod
    def _content(dir_fd: int, name: str, st: os.stat_result) -> bytes:
        if stat.S_ISLNK(st.st_mode):
            return os.fsencode(os.readlink(name, dir_fd=dir_fd))
        if not stat.S_ISREG(st.st_mode):
            # FIFOs, sockets: git cannot store them, but their presence must still
            # change the revision.
            return f"harness-special-file mode={st.st_mode:o}".encode()
        fd = os.open(name, fileops.FILE_FLAGS, dir_fd=dir_fd)
        with os.fdopen(fd, "rb") as handle:
            return handle.read()


def _git_hash(kind: bytes, body: bytes) -> bytes:
    return hashlib.sha1(kind + b" " + str(len(body)).encode() + b"\0" + body, usedforsecurity=False).digest()


# -- the workspace -----------------------------------------------------------------


@dataclass(frozen=True)
class Change:
    path: str
    old: bytes | None
    new: bytes | None


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
        self._hasher = TreeHasher()

    @property
    def source(self) -> dict[str, JSON]:
        loaded: dict[str, JSON] = json.loads((self.root / READY).read_text())
        return loaded

    def revision(self) -> str:
        try:
            return self._hasher.tree(self.dir)
        except (fileops.FileRefused, OSError, RecursionError) as exc:
            # A tree trusted code cannot read (nesting a check created to exhaust
            # fds, say) gets a revision equal to no other, not even the next call's:
            # the harness then refuses receipts against it and no evidence is ever
            # current, so the run stops instead of vouching for unseen content.
            log.warning("workspace %s cannot be hashed: %s", self.dir, exc)
            return f"unhashable-{time.time_ns():x}"

    def base_revision(self) -> str:
        return TreeHasher().tree(self.pristine)

    def preview(self, tool: str, args: Mapping[str, JSON]) -> str | None:
        """What a write would change, as a unified diff against the current content."""
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
            if tool == "publish":
                # The reviewer sees exactly the patch that publish would write.
                published = self.diff()
                skipped = "".join(f"# not published: {s['path']} ({s['reason']})\n" for s in published.skipped)
                return skipped + published.text
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
        """Files that differ from the pristine source (content or kind)."""
        old, new = _snapshot(self.pristine), _snapshot(self.dir)
        out = []
        for path in sorted(set(old) | set(new)):
            if old.get(path) != new.get(path):
                out.append(Change(path, _read_entry(self.pristine, path, old.get(path)), _read_entry(self.dir, path, new.get(path))))
        return out

    def diff(self) -> PatchSet:
        """The workspace's changes as a patch ``git apply``/``patch -p1`` accept.
        Binary files and symlinks cannot be expressed and are listed as skipped."""
        text: list[str] = []
        files: list[str] = []
        skipped: list[dict[str, str]] = []
        old_kinds, new_kinds = _kinds(self.pristine), _kinds(self.dir)
        for change in self.changes():
            kinds = {old_kinds.get(change.path, "file"), new_kinds.get(change.path, "file")}
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


def _snapshot(root: Path) -> dict[str, tuple[int, str]]:
    """path -> (file type, content hash); the same hashing as the revision."""
    out: dict[str, tuple[int, str]] = {}
    with fileops.opened_root(root) as fd:
        for entry in fileops.walk(fd):
            if stat.S_ISDIR(entry.st.st_mode):
                continue
            content = TreeHasher._content(entry.dir_fd, entry.name, entry.st)
            out[entry.path] = (stat.S_IFMT(entry.st.st_mode), hashlib.sha256(content).hexdigest())
    return out


def _kinds(root: Path) -> dict[str, str]:
    out = {}
    with fileops.opened_root(root) as fd:
        for entry in fileops.walk(fd):
            mode = entry.st.st_mode
            out[entry.path] = "file" if stat.S_ISREG(mode) else "dir" if stat.S_ISDIR(mode) else "other"
    return out


def _read_entry(root: Path, path: str, seen: tuple[int, str] | None) -> bytes | None:
    if seen is None:
        return None
    if seen[0] != stat.S_IFREG:
        return b""
    return fileops.read_bytes(root, path, limit=None)


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
    A remote must be one of ``remotes.allowed``; its clone's git directory is kept as
    ``remote.git/`` (never mounted) for publishing.
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
        if source.url is not None:
            meta.update(url=source.url, commit=_from_remote(source.url, source.ref, staging, remotes or RemoteAccess()))
        else:
            assert source.path is not None  # one of path and url, by WorkspaceSource
            location = _resolve(source.path, base_dir, allowed_roots)
            meta["path"] = str(location)
            if source.kind == "path":
                _copy_tree(location, staging / "pristine", skip=CACHE_DIRS)
            elif source.kind == "git":
                meta["commit"] = _from_git(location, source.ref, staging)
            else:
                _from_archive(location, staging / "pristine")
        _copy_tree(staging / "pristine", staging / "workspace", skip=set())
        _give_to_sandbox(staging / "workspace")
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
            mode = os.lstat(os.path.join(directory, name)).st_mode
            regular = stat.S_ISREG(mode) or stat.S_ISDIR(mode) or stat.S_ISLNK(mode)
            if not regular or name in skip or (name == ".git" and Path(directory) == src):
                left_out.add(name)
        return left_out

    shutil.copytree(src, dst, symlinks=True, ignore=ignore)


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
    done = remote.git(args, RemoteAccess(timeout_seconds=300), "file", cwd=cwd)
    if done.returncode != 0:
        raise WorkspaceSourceError(f"git {args[0]} failed: {(done.stderr.strip() or 'timed out')[:500]}")
    return done.stdout.strip()


def _from_git(location: Path, ref: str | None, staging: Path) -> str:
    if not (location / ".git").exists() and not (location / "HEAD").is_file():
        raise WorkspaceSourceError(f"{location} is not a local git repository")
    if ref is not None and (ref.startswith("-") or any(c.isspace() or ord(c) < 32 for c in ref)):
        raise WorkspaceSourceError(f"{ref!r} is not a valid git ref", field="workspace.ref")
    clone = staging / "clone"
    _git(["clone", "--quiet", "--no-hardlinks", "--no-checkout", "--", str(location), str(clone)])
    try:
        commit = _git(["rev-parse", "--verify", "--quiet", f"{ref or 'HEAD'}^{{commit}}"], cwd=clone)
    except WorkspaceSourceError:
        raise WorkspaceSourceError(f"ref {ref or 'HEAD'!r} is not a commit in {location}", field="workspace.ref") from None
    _git(["checkout", "--quiet", "--detach", commit], cwd=clone)
    _copy_tree(clone, staging / "pristine", skip=set())
    shutil.rmtree(clone)
    return commit


def _from_remote(url: str, ref: str | None, staging: Path, access: RemoteAccess) -> str:
    clone = staging / "clone"
    commit = remote.clone(url, ref, clone, access)
    _copy_tree(clone, staging / "pristine", skip=set())
    os.rename(clone / ".git", staging / REMOTE_GIT_DIR)
    shutil.rmtree(clone)
    return commit


def _archive_member_path(name: str) -> str:
    clean = name[2:] if name.startswith("./") else name
    clean = clean.rstrip("/")
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
