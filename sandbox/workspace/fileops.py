"""Race-free file tools on the worker host.

Every path is resolved component by component from a directory fd of the workspace
root with ``O_NOFOLLOW | O_DIRECTORY``, and the last component is opened with
``O_NOFOLLOW``: a symlink anywhere (including one a check planted in the workspace)
is refused by the same system call that opens the file, so nothing can be swapped
between a check and the open. Writes go to a temporary file in the same directory
(via its fd) and are renamed over the target, which replaces a symlink rather than
writing through it.

Tool-level problems raise ``FileRefused`` with a message for the model; the
executor turns it into a receipt with ``data.error``."""

from __future__ import annotations

import errno
import io
import os
import secrets
import stat
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import TypedDict

from sandbox.workspace import patches

DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# O_NONBLOCK so that opening a FIFO a check left behind cannot hang the worker.
FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
MAX_DEPTH = 128
MAX_EDIT_BYTES = 20_000_000  # files read whole (patch, preview, search) stay below this
MAX_LINE_BYTES = 16_000
MAX_MATCH_CHARS = 400
BINARY_SNIFF = 8192


class FileRefused(Exception):
    pass


class Missing(FileRefused):
    """The path (or one of its directories) does not exist."""


def split_path(path: str) -> list[str]:
    """Relative components; the harness already canonicalised, this is the second lock."""
    if path in ("", "."):
        return []
    if path.startswith("/") or "\x00" in path:
        raise FileRefused(f"{path}: must be a relative path inside the workspace")
    parts = path.split("/")
    for part in parts:
        if part in ("", ".", ".."):
            raise FileRefused(f"{path}: '..', '.' and empty path components are refused")
    return parts


def _describe(dir_fd: int, name: str) -> str:
    try:
        mode = os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode
    except FileNotFoundError:
        return "does not exist"
    except OSError as exc:
        return f"cannot be inspected ({exc.strerror})"
    if stat.S_ISLNK(mode):
        return "is a symlink (symlinks are never followed)"
    if stat.S_ISDIR(mode):
        return "is a directory"
    if stat.S_ISREG(mode):
        return "is a regular file"
    return "is a special file (not a regular file or directory)"


def _refused(dir_fd: int, name: str, shown: str) -> FileRefused:
    why = _describe(dir_fd, name)
    return Missing(f"{shown} {why}") if why == "does not exist" else FileRefused(f"{shown} {why}")


def _open_dir(parent: int, name: str, shown: str) -> int:
    try:
        return os.open(name, DIR_FLAGS, dir_fd=parent)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR, errno.ENOENT, errno.EACCES):
            raise _refused(parent, name, shown) from None
        raise


@contextmanager
def opened_root(root: Path) -> Iterator[int]:
    fd = os.open(root, DIR_FLAGS)
    try:
        yield fd
    finally:
        os.close(fd)


@contextmanager
def opened_dir(root_fd: int, parts: list[str], *, create: bool = False) -> Iterator[int]:
    """A fd of the directory ``parts`` names; ``create`` makes missing directories
    (owned like the root, so the sandbox user can use them)."""
    fd = os.dup(root_fd)
    try:
        for index, name in enumerate(parts):
            shown = "/".join(parts[: index + 1])
            if create:
                try:
                    os.mkdir(name, 0o755, dir_fd=fd)
                    _own_like_root(root_fd, name, fd)
                except FileExistsError:
                    pass
            child = _open_dir(fd, name, shown)
            os.close(fd)
            fd = child
        yield fd
    finally:
        os.close(fd)


def _own_like_root(root_fd: int, name: str, dir_fd: int) -> None:
    if os.geteuid() != 0:
        return
    st = os.fstat(root_fd)
    os.chown(name, st.st_uid, st.st_gid, dir_fd=dir_fd, follow_symlinks=False)


def _open_file(dir_fd: int, name: str, shown: str) -> int:
    try:
        fd = os.open(name, FILE_FLAGS, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOENT, errno.EISDIR, errno.EACCES, errno.ENXIO):
            raise _refused(dir_fd, name, shown) from None
        raise
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise _refused(dir_fd, name, shown)
    return fd


def _refuse_git(parts: list[str], path: str) -> None:
    if ".git" in parts:
        raise FileRefused(f"{path}: .git directories are not accessible")


def read_bytes(root: Path, path: str, limit: int | None = MAX_EDIT_BYTES) -> bytes | None:
    """The whole file, or None when it does not exist (a symlink is refused)."""
    parts = split_path(path)
    if not parts:
        raise FileRefused(f"{path}: is the workspace root, not a file")
    _refuse_git(parts, path)
    try:
        with opened_root(root) as root_fd, opened_dir(root_fd, parts[:-1]) as dir_fd:
            fd = _open_file(dir_fd, parts[-1], path)
    except Missing:
        return None
    with os.fdopen(fd, "rb") as handle:
        data = handle.read() if limit is None else handle.read(limit + 1)
    if limit is not None and len(data) > limit:
        raise FileRefused(f"{path}: larger than {limit} bytes")
    return data


def decode(data: bytes) -> str:
    return data.decode("utf-8", errors="surrogateescape")


def encode(text: str) -> bytes:
    return text.encode("utf-8", errors="surrogateescape")


def is_binary(data: bytes) -> bool:
    return b"\x00" in data[:BINARY_SNIFF]


# -- walking -----------------------------------------------------------------------


@dataclass(frozen=True)
class Entry:
    path: str  # relative to the walk's root, '/'-separated
    name: str
    dir_fd: int  # valid only while the walk is at this entry
    st: os.stat_result


def stat_entries(dir_fd: int, prefix: str, depth: int) -> Iterator[tuple[str, os.stat_result]]:
    """A directory's entries by name, sorted, with their own (never a symlink
    target's) status; entries removed meanwhile are left out. ``depth`` and ``prefix``
    (for the message) bound how deep a tree the callers descend into."""
    if depth > MAX_DEPTH:
        raise FileRefused(f"{prefix or '.'}: directories nested deeper than {MAX_DEPTH} levels")
    with os.scandir(dir_fd) as it:
        names = sorted(entry.name for entry in it)
    for name in names:
        try:
            yield name, os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        except FileNotFoundError:
            continue


def walk(dir_fd: int, prefix: str = "", depth: int = 0) -> Iterator[Entry]:
    """Depth-first, sorted, never following symlinks, leaving out ``.git``
    directories (the tools never touch them); directories are yielded before
    their contents."""
    for name, st in stat_entries(dir_fd, prefix, depth):
        if name == ".git":
            continue
        path = f"{prefix}{name}"
        yield Entry(path, name, dir_fd, st)
        if stat.S_ISDIR(st.st_mode):
            try:
                child = os.open(name, DIR_FLAGS, dir_fd=dir_fd)
            except OSError:
                continue
            try:
                yield from walk(child, path + "/", depth + 1)
            finally:
                os.close(child)


def _kind(mode: int) -> str:
    if stat.S_ISREG(mode):
        return "file"
    if stat.S_ISDIR(mode):
        return "dir"
    if stat.S_ISLNK(mode):
        return "symlink"
    return "special"


# -- the tools -----------------------------------------------------------------------


class Listing(TypedDict):
    path: str
    files: list[str]
    symlinks: list[str]
    truncated: bool


def list_files(root: Path, path: str, max_entries: int) -> Listing:
    parts = split_path(path)
    _refuse_git(parts, path)
    prefix = "" if not parts else path + "/"
    files: list[str] = []
    symlinks: list[str] = []
    truncated = False
    with opened_root(root) as root_fd, opened_dir(root_fd, parts) as dir_fd:
        for entry in walk(dir_fd, prefix):
            kind = _kind(entry.st.st_mode)
            if kind == "dir":
                continue
            if len(files) + len(symlinks) >= max_entries:
                truncated = True
                break
            (symlinks if kind == "symlink" else files).append(entry.path)
    return {"path": path, "files": files, "symlinks": symlinks, "truncated": truncated}


def _lines(handle: io.BufferedReader) -> Iterator[tuple[bytes, bool]]:
    """Lines without their break, cut at MAX_LINE_BYTES (then True) so one huge
    line cannot exhaust memory."""
    while True:
        raw = handle.readline(MAX_LINE_BYTES)
        if not raw:
            return
        cut = len(raw) == MAX_LINE_BYTES and not raw.endswith(b"\n")
        while cut:
            rest = handle.readline(1 << 20)
            if not rest or rest.endswith(b"\n"):
                break
        yield raw.rstrip(b"\n"), cut


def read_file(root: Path, path: str, offset: int, limit: int, max_bytes: int) -> dict[str, object]:
    parts = split_path(path)
    if not parts:
        raise FileRefused(f"{path}: is the workspace root, not a file")
    _refuse_git(parts, path)
    with opened_root(root) as root_fd, opened_dir(root_fd, parts[:-1]) as dir_fd:
        fd = _open_file(dir_fd, parts[-1], path)
    with os.fdopen(fd, "rb") as handle:
        if is_binary(handle.peek(BINARY_SNIFF)[:BINARY_SNIFF]):
            size = os.fstat(handle.fileno()).st_size
            raise FileRefused(f"{path}: is a binary file ({size} bytes); read_file shows text only")
        lines: list[str] = []
        cut_lines = 0
        used = 0
        more = False
        for number, (raw, cut) in enumerate(_lines(handle)):
            if number < offset:
                continue
            # At least one line per call, so a caller paging with next_offset progresses.
            if len(lines) >= limit or (lines and used + len(raw) + 1 > max_bytes):
                more = True
                break
            lines.append(decode(raw) + (" [line cut]" if cut else ""))
            cut_lines += cut
            used += len(raw) + 1
    data: dict[str, object] = {
        "path": path,
        "offset": offset,
        "lines": len(lines),
        "content": "".join(line + "\n" for line in lines),
        "next_offset": offset + len(lines) if more else None,
    }
    if cut_lines:
        data["lines_cut"] = cut_lines
    return data


def search(root: Path, pattern: str, path: str, max_matches: int) -> dict[str, object]:
    parts = split_path(path)
    _refuse_git(parts, path)
    matches: list[dict[str, object]] = []
    skipped: list[str] = []
    searched = 0
    truncated = False
    with opened_root(root) as root_fd:
        targets = _search_targets(root_fd, parts, path)
        for entry_path, dir_fd, name in targets:
            try:
                fd = _open_file(dir_fd, name, entry_path)
            except FileRefused:
                skipped.append(entry_path)
                continue
            with os.fdopen(fd, "rb") as handle:
                data = handle.read(MAX_EDIT_BYTES + 1)
            if len(data) > MAX_EDIT_BYTES or is_binary(data):
                skipped.append(entry_path)
                continue
            searched += 1
            for number, line in enumerate(decode(data).splitlines(), start=1):
                if pattern in line:
                    if len(matches) >= max_matches:
                        truncated = True
                        break
                    matches.append({"path": entry_path, "line": number, "text": line[:MAX_MATCH_CHARS]})
            if truncated:
                break
    return {"pattern": pattern, "path": path, "matches": matches, "files_searched": searched, "skipped": skipped, "truncated": truncated}


def _search_targets(root_fd: int, parts: list[str], path: str) -> Iterator[tuple[str, int, str]]:
    if parts:
        with opened_dir(root_fd, parts[:-1]) as parent:
            if _describe(parent, parts[-1]) == "is a regular file":
                yield path, parent, parts[-1]
                return
    prefix = "" if not parts else path + "/"
    with opened_dir(root_fd, parts) as dir_fd:
        for entry in walk(dir_fd, prefix):
            if stat.S_ISREG(entry.st.st_mode):
                yield entry.path, entry.dir_fd, entry.name


def _check_write_target(dir_fd: int, name: str, path: str) -> os.stat_result | None:
    try:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return None
    if not stat.S_ISREG(st.st_mode):
        raise FileRefused(f"{path} {_describe(dir_fd, name)}; only regular files can be written")
    return st


def _atomic_write(root_fd: int, dir_fd: int, name: str, data: bytes, mode: int) -> None:
    tmp = f".{name[:100]}.harness-{secrets.token_hex(6)}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=dir_fd)
    try:
        try:
            view = memoryview(data)
            while view:
                written = os.write(fd, view)
                view = view[written:]
            os.fchmod(fd, mode)
            if os.geteuid() == 0:
                st = os.fstat(root_fd)
                os.fchown(fd, st.st_uid, st.st_gid)
        finally:
            os.close(fd)
        # rename() replaces whatever has the name (a symlink planted after our
        # check included) and never writes through it.
        os.replace(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        with suppress(FileNotFoundError):
            os.unlink(tmp, dir_fd=dir_fd)
        raise


def write_file(root: Path, path: str, content: str) -> dict[str, object]:
    parts = split_path(path)
    if not parts:
        raise FileRefused(f"{path}: is the workspace root, not a file")
    _refuse_git(parts, path)
    try:
        data = content.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise FileRefused(f"{path}: content is not valid UTF-8 ({exc.reason})") from None
    with opened_root(root) as root_fd, opened_dir(root_fd, parts[:-1], create=True) as dir_fd:
        st = _check_write_target(dir_fd, parts[-1], path)
        # Only a file of the same size can hold the same content: no other is opened.
        if st is not None and st.st_size == len(data):
            fd = _open_file(dir_fd, parts[-1], path)
            try:
                if read_to_end(fd, len(data)) == data:
                    return {"path": path, "bytes": len(data), "created": False, "unchanged": True}
            finally:
                os.close(fd)
        mode = stat.S_IMODE(st.st_mode) if st is not None else 0o644
        _atomic_write(root_fd, dir_fd, parts[-1], data, mode)
    return {"path": path, "bytes": len(data), "created": st is None, "unchanged": False}


@dataclass(frozen=True)
class PlannedChange:
    path: str
    old: str | None
    new: str | None


def plan_patch(root: Path, patch_text: str) -> list[PlannedChange]:
    """Parse and apply every hunk in memory; PatchRefused/FileRefused if anything
    does not apply, before a single byte is written."""
    planned = []
    for file_patch in patches.parse_patch(patch_text):
        _refuse_git(split_path(file_patch.path), file_patch.path)
        current_bytes = read_bytes(root, file_patch.path)
        if current_bytes is not None and is_binary(current_bytes):
            raise patches.PatchRefused(f"{file_patch.path}: is a binary file; patches apply to text files")
        current = None if current_bytes is None else decode(current_bytes)
        planned.append(PlannedChange(file_patch.path, current, patches.apply_hunks(file_patch, current)))
    return planned


def apply_planned(root: Path, planned: list[PlannedChange]) -> dict[str, object]:
    changed: list[dict[str, object]] = []
    with opened_root(root) as root_fd:
        for change in planned:
            parts = split_path(change.path)
            with opened_dir(root_fd, parts[:-1], create=change.new is not None) as dir_fd:
                st = _check_write_target(dir_fd, parts[-1], change.path)
                if change.new is None:
                    os.unlink(parts[-1], dir_fd=dir_fd)
                    changed.append({"path": change.path, "action": "deleted"})
                    continue
                mode = stat.S_IMODE(st.st_mode) if st is not None else 0o644
                _atomic_write(root_fd, dir_fd, parts[-1], encode(change.new), mode)
                changed.append({"path": change.path, "action": "created" if change.old is None else "modified"})
    return {"files": changed}


def read_to_end(fd: int, size_hint: int) -> bytes:
    """All of an open file's bytes by plain reads on the descriptor: a walk or a copy
    reads every file, and a file object's set-up and teardown were a third of a
    walk's time. The size is a hint; reading on to the end keeps a file that grew whole."""
    chunks = [os.read(fd, size_hint + 1)]
    while chunks[-1]:
        chunks.append(os.read(fd, 1 << 20))
    return b"".join(chunks)
