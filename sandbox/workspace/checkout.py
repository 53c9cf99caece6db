"""A git source checked out as the sandbox's uid, its revision read from git's own
tree objects instead of a walk that hashes every file.

Preparing a large repository used to cost, beyond ``git clone --local``, a pass that
handed every file to the sandbox's uid and a full walk that hashed every file to learn
whether the checkout was exactly the commit's tree. Here git writes the files as that
uid (``setpriv``, keeping only the capability to read and search whatever the worker
can, so the source's objects and the run's root stay readable whatever their modes),
so they are born owned correctly; and the revision index is made of the commit's tree
objects, read with one ``git cat-file --batch`` (``GitObjects``) while git checks the
commit out.

A small tree (``SMALL_TREE`` entries at most, every name a plain one git writes as
given) is not git's to write: starting ``setpriv`` and ``git read-tree`` cost more
than its files. Its blobs are read through the same ``git cat-file`` after its trees,
each hashed as it is written (git's checkout does not), and written as git writes them
(``_written_here``): each file made anew (``O_EXCL``, no symlink followed, under the
descriptor of its directory), handed to the sandbox's uid and given git's mode before
a byte is written. A tree with any other name is git's, as a large one is.

Why the checkout is the commit's tree without reading it back: git writes every blob
of the tree verbatim into an empty directory unless something converts it on the way,
and each way is ruled out before the index is trusted:

- conversions (end of line, ``filter``, ``ident``, ``working-tree-encoding``) need an
  attribute or ``core.autocrlf``: the tree holds no ``.gitattributes`` anywhere, the
  clone's git directory no ``info/attributes``, no system or global configuration is
  read (``remote.git_environment``) and ``core.autocrlf`` is off;
- what git stores but cannot write as a file the walk would hash the same: a gitlink
  (a submodule checks out as an empty directory), an empty tree, a mode other than
  the four git writes, a symlink target git cannot pass to ``symlink()`` (empty, with
  a NUL, longer than a path), a tree not in git's canonical order or with a name twice,
  a name that is ``.``, ``..``, ``.git`` or holds a ``/``, or nesting deeper than the
  walk descends: any of them and the checkout is made and walked as before;
- the executable bit comes from the umask, which is set (022) for git (a small tree's
  modes are set, 0644 or 0755);
- git's own refusals (a path it will not write) fail the checkout, which then is made
  and walked as before; a small tree is written here only when git refuses none of its
  names (``PLAIN_NAME``), and a blob that does not hash to its name has it walked.

And it is not the last word: the full walk runs before publish is previewed or
ships and before the run completes, so a checkout that differed all the same stops
the run with ``revision_mismatch`` before its revision vouched for anything; and every
file a diff shows is read back against the blob hash the index records. The pickup
right after preparation does not walk it (``RunWorkspace.picked_up``): that walk
would read back what git has just written, in a directory nobody else writes."""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import IO

from sandbox.vcs.remote import RemoteAccess, git_environment
from sandbox.workspace.fileops import DIR_FLAGS, MAX_DEPTH
from sandbox.workspace.hashing import EMPTY_TREE, LINK_MODE, TREE_MODE, git_hash

BLOB_MODES = {b"100644", b"100755", LINK_MODE}
REFUSED_NAMES = {b"", b".", b".."}
GIT_NAMES = {b".git", b".gitattributes"}  # refused in any case
# A tree entry: its mode, a space, its name up to a NUL, then its object's 20 bytes.
ENTRY = re.compile(rb"([0-9]+) ([^\0]*)\0(.{20})", re.DOTALL)
SYMLINK_MAX = 4095
FILE_MODES = {b"100644": 0o644, b"100755": 0o755}
# A tree of up to this many entries (files, symlinks, directories) is written by the
# preparation itself, a larger one by git's checkout: measured, bench/rebuild_cost.py
# and docs/performance-history.md (Moving a run to another host, 2026-12-07, rebuild3).
SMALL_TREE = 300
# Names git writes as given on any platform, none of them one its NTFS or HFS
# protections refuse (``.git`` followed by dots or spaces, ``git~1``, a ``:`` stream,
# a backslash, an ignorable Unicode character): printable ASCII without ``\\``, ``:``
# or ``~``, not starting with a space nor ending with a space or a dot. A tree with
# any other name is left to git's checkout, which refuses what it always refused.
PLAIN_NAME = re.compile(rb"[\x21-\x39\x3b-\x5b\x5d-\x7d](?:[\x20-\x39\x3b-\x5b\x5d-\x7d]*[\x21-\x2d\x2f-\x39\x3b-\x5b\x5d-\x7d])?")
GIT_TIMEOUT = 600
PIPE_PAGE = 4096  # what a pipe holds at the least (pipe(7))
PIPE_BUFFER = 1 << 16  # git's answers read in pieces of what a pipe holds by default


class NotTrusted(Exception):
    """The checkout cannot be trusted to be the commit's tree without a walk."""


class _Deadlines:
    """The ``git cat-file`` processes still open, each killed once ``GIT_TIMEOUT`` has
    passed since it started, by one thread for them all, started with the first: a
    thread (``threading.Timer``) for each waited about 2 ms to be scheduled beside the
    git just started, a rebuild's critical path."""

    def __init__(self) -> None:
        self._due: dict[int, tuple[float, subprocess.Popen[bytes]]] = {}  # by id(process)
        self._changed = threading.Condition()
        self._running = False

    def add(self, process: subprocess.Popen[bytes]) -> None:
        with self._changed:
            self._due[id(process)] = (time.monotonic() + GIT_TIMEOUT, process)
            if not self._running:
                self._running = True
                threading.Thread(target=self._kill_when_due, name="git-deadlines", daemon=True).start()
            self._changed.notify()

    def remove(self, process: subprocess.Popen[bytes]) -> None:
        with self._changed:
            self._due.pop(id(process), None)

    def _kill_when_due(self) -> None:
        with self._changed:
            while True:
                now = time.monotonic()
                for key, (due, process) in list(self._due.items()):
                    if due <= now:
                        process.kill()
                        del self._due[key]
                self._changed.wait(min((due for due, _process in self._due.values()), default=now + GIT_TIMEOUT) - now)


_deadlines = _Deadlines()


def _forget_in_child() -> None:
    # A forked child runs none of its parent's threads and owns none of its gits: a
    # lock another thread held at the fork would never be released either.
    global _deadlines
    _deadlines = _Deadlines()


os.register_at_fork(after_in_child=_forget_in_child)


class GitObjects:
    """One ``git cat-file --batch`` answering every read of a preparation (the commit
    the ref names, its trees level by level, the symlinks' targets) instead of a git
    process for each: each costs more than what it reads on a small repository."""

    def __init__(self, git_dir: Path) -> None:
        self.git_dir = git_dir
        self._process = subprocess.Popen(
            ["git", "cat-file", "--batch"],
            cwd=git_dir,
            env=git_environment(RemoteAccess(), "file"),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            bufsize=PIPE_BUFFER,
        )
        # Bounded as each git a preparation runs is: a git that stops answering is
        # killed, and the read waiting on it ends as a failed one (NotTrusted).
        _deadlines.add(self._process)

    def __enter__(self) -> GitObjects:
        return self

    def __exit__(self, *_exc: object) -> None:
        _deadlines.remove(self._process)
        if self._process.returncode is None:  # not ended by a failed read
            self._process.kill()
            self._process.communicate()

    def commit(self, ref: str) -> tuple[str, str] | None:
        """The commit ``ref`` names and its root tree, resolved as ``git rev-parse
        --verify`` resolves ``ref^{commit}``; None when it names no commit."""
        [(header, body)] = self._answers([ref.encode() + b"^{commit}"])
        first = body.split(b"\n", 1)[0]
        if len(header) != 3 or header[1] != b"commit" or not first.startswith(b"tree "):
            return None
        return header[0].decode(), first[len(b"tree ") :].decode()

    def bodies(self, shas: list[bytes], kind: bytes) -> list[tuple[bytes, bytes]]:
        """The bodies of ``shas``, which must all be objects of ``kind``."""
        out = []
        for sha, (header, body) in zip(shas, self._answers([sha.hex().encode() for sha in shas]), strict=True):
            if len(header) != 3 or header[0] != sha.hex().encode() or header[1] != kind:
                raise NotTrusted(f"object {sha.hex()} is not a {kind.decode()}")
            out.append((sha, body))
        return out

    def write_blobs(self, shas: list[bytes], into: Callable[[int], int]) -> None:
        """The blobs ``shas``, each written to the file ``into`` opens for its index
        and closes, a pipe's read at a time (not held whole), each checked to hash to
        its name (NotTrusted otherwise)."""

        def opened(n: int, header: list[bytes]) -> int:
            if len(header) != 3 or header[0] != shas[n].hex().encode() or header[1] != b"blob":
                raise NotTrusted(f"object {shas[n].hex()} is not a blob")
            try:
                return into(n)
            except OSError as exc:  # the file's, not git's
                raise _unwritten(exc) from None

        self._answers([sha.hex().encode() for sha in shas], opened)

    def _answers(self, names: list[bytes], into: Callable[[int, list[bytes]], int] | None = None) -> list[tuple[list[bytes], bytes]]:
        """git's header (split) and body for each name, or with ``into`` each body
        written to the file it opens (and hashed as it goes). Up to a pipe's page of
        names (what a pipe holds at the least) is written whole before git's answers
        are read; more is written by a thread while they are read here, so git never
        waits for its answers to be read while this waits for it to read."""
        stdin, stdout = self._process.stdin, self._process.stdout
        assert stdin is not None and stdout is not None  # both piped
        request = b"".join(name + b"\n" for name in names)
        writer = None
        answers: list[tuple[list[bytes], bytes]] = []
        try:
            if len(request) <= PIPE_PAGE:
                _write_all(stdin, request)
            else:
                writer = threading.Thread(target=_write_all, args=(stdin, request), name="git-cat-file-requests", daemon=True)
                writer.start()
            for n, _name in enumerate(names):
                header = stdout.readline().split()
                if not header:
                    raise OSError("git cat-file ended early")
                body = b""
                if len(header) == 3 and into is not None:
                    _copy(stdout, header, into(n, header))
                elif len(header) == 3:  # "<sha> <kind> <size>", else "<name> missing" (or ambiguous)
                    body = _read(stdout, int(header[2]) + 1)[:-1]
                answers.append((header, body))
        except BaseException as exc:
            # Ended mid-answer, git's stream cannot be read on: no later read may
            # take the rest of this one for its own.
            self._process.kill()
            if writer is not None:
                writer.join()  # its next write fails: git is gone
            error = self._process.communicate()[1].decode(errors="replace")[:300]
            if isinstance(exc, (OSError, ValueError)):
                raise NotTrusted(f"git cat-file failed: {error or exc}") from None
            raise
        if writer is not None:
            writer.join()
        return answers


def _read(stream: IO[bytes], size: int) -> bytes:
    data = stream.read(size)
    if len(data) != size:
        raise OSError("git cat-file ended early")
    return data


def _copy(stream: IO[bytes], header: list[bytes], fd: int) -> None:
    """An answer's body (``header``: its name, kind and size) written to ``fd``,
    which is closed; NotTrusted when it does not hash to its name."""
    try:
        left = int(header[2])
        hashed = hashlib.sha1(header[1] + b" " + header[2] + b"\0", usedforsecurity=False)
        while left:
            piece = _read(stream, min(left, PIPE_BUFFER))
            hashed.update(piece)
            left -= len(piece)
            try:
                while piece:
                    piece = piece[os.write(fd, piece) :]
            except OSError as exc:  # the file's, not git's
                raise _unwritten(exc) from None
        _read(stream, 1)  # the newline after the body
    finally:
        os.close(fd)
    if hashed.digest() != bytes.fromhex(header[0].decode()):
        raise NotTrusted(f"object {header[0].decode()} does not hash to its name")


def _write_all(stream: IO[bytes], data: bytes) -> None:
    try:
        stream.write(data)
        stream.flush()
    except (OSError, ValueError):
        pass  # git ended: the reading side says so


def commit_trees(objects: GitObjects, root: str, large: Callable[[], None] = lambda: None) -> tuple[str, dict[bytes, bytes]]:
    """The commit's root tree ``root`` and all its tree objects (sha -> body), each
    checked to be in the form whose checkout the walk hashes the same (NotTrusted
    otherwise). ``large`` is called as soon as the levels read hold more than
    ``SMALL_TREE`` entries (git's checkout then starts while the rest are read)."""
    if (objects.git_dir / "info" / "attributes").exists():
        raise NotTrusted("the clone has attributes of its own")
    if root == EMPTY_TREE:
        return root, {}
    trees: dict[bytes, bytes] = {}
    subtrees: dict[bytes, list[bytes]] = {}  # each tree's trees, for the deepest path below
    level = [bytes.fromhex(root)]
    depth = 0
    entries_read = 0
    large_called = False

    def read(entries: int) -> None:
        nonlocal large_called
        if entries > SMALL_TREE and not large_called:
            large_called = True
            large()

    while level:
        if depth > MAX_DEPTH:
            raise NotTrusted(f"directories nested deeper than {MAX_DEPTH} levels")
        # The level's trees taken to hold as many entries each as those read so far:
        # git starts before a level that makes the tree large is read, not after.
        read(entries_read + len(level) * entries_read // max(len(trees), 1))
        below: list[bytes] = []
        links: list[bytes] = []
        for sha, body in objects.bodies(level, b"tree"):
            entries = _checked(sha, body)
            entries_read += len(entries)
            read(entries_read)
            trees[sha] = body
            subtrees[sha] = [child for mode, _name, child in entries if mode == TREE_MODE]
            below += [child for child in subtrees[sha] if child not in trees]
            links += [child for mode, _name, child in entries if mode == LINK_MODE]
        for _sha, target in objects.bodies(links, b"blob"):
            if not target or b"\0" in target or len(target) > SYMLINK_MAX:
                raise NotTrusted("a symlink's target cannot be written as git stores it")
        level = list(dict.fromkeys(below))
        depth += 1
    # A tree met again deeper down was read at its shallowest place: the deepest
    # path is measured over the trees, as the walk will descend it.
    try:
        deepest = _height(bytes.fromhex(root), subtrees, {}) - 1
    except RecursionError:
        deepest = MAX_DEPTH + 1
    if deepest > MAX_DEPTH:
        raise NotTrusted(f"directories nested deeper than {MAX_DEPTH} levels")
    return root, trees


def _height(sha: bytes, subtrees: dict[bytes, list[bytes]], known: dict[bytes, int]) -> int:
    if sha not in known:
        known[sha] = 1 + max((_height(child, subtrees, known) for child in subtrees[sha]), default=0)
    return known[sha]


def _checked(sha: bytes, body: bytes) -> list[tuple[bytes, bytes, bytes]]:
    """The tree's entries (mode, name, sha) in order, checked: a well-formed tree of
    this hash, in git's canonical form (each name once, sorted as git sorts, a tree as
    its name and "/"), of the four modes git writes and names it writes as given.
    Checked over the whole body at once where it can be: this runs for every
    directory of the repository while git checks the files out."""
    entries: list[tuple[bytes, bytes, bytes]] = ENTRY.findall(body)
    if sum(len(mode) + len(name) + 22 for mode, name, _child in entries) != len(body):
        raise NotTrusted(f"tree {sha.hex()} is malformed")
    names = [name for _mode, name, _child in entries]
    keys = [name + b"/" if mode == TREE_MODE else name for mode, name, _child in entries]
    if (
        not entries
        or git_hash(b"tree", body) != sha
        or len(set(names)) != len(names)
        or any(before >= after for before, after in zip(keys, keys[1:], strict=False))
    ):
        raise NotTrusted(f"tree {sha.hex()} is empty or not in git's canonical form")
    modes = {mode for mode, _name, _child in entries}
    if not modes <= BLOB_MODES | {TREE_MODE}:
        odd = min(modes - BLOB_MODES - {TREE_MODE})
        raise NotTrusted(f"tree {sha.hex()} holds an entry of mode {odd.decode(errors='replace')}")
    # Names hold no NUL (the parse ends them there): joined with NULs, one search
    # each finds a refused name or a slash in any of them.
    joined = b"\0" + b"\0".join(names).lower() + b"\0"
    if b"/" in joined or any(b"\0" + refused + b"\0" in joined for refused in REFUSED_NAMES | GIT_NAMES):
        odd = next(n for n in names if n in REFUSED_NAMES or b"/" in n or n.lower() in GIT_NAMES)
        raise NotTrusted(f"tree {sha.hex()} holds the name {odd!r}")
    return entries


def check_out(objects: GitObjects, commit: str, root: str, dest: Path, uid: int, gid: int) -> tuple[str, dict[bytes, bytes]]:
    """``commit``'s tree ``root`` written into the empty ``dest`` as ``uid``'s, and
    its trees as ``commit_trees`` reads and checks them. A small tree of plain names
    is written here from its blobs, read through ``objects`` as its trees were: git's
    checkout would cost a process or two more than the files themselves. Any other
    is git's (``checking_out``), started as soon as the trees read show it is large,
    so that it writes while the rest are read. NotTrusted as either says; ``dest``
    then holds what was written."""
    with ExitStack() as by_git:
        started: list[bool] = []

        def git_checks_out() -> None:
            started.append(True)
            by_git.enter_context(checking_out(uid, gid, objects.git_dir, commit, dest))

        trusted = commit_trees(objects, root, git_checks_out)
        if not started and not _written_here(objects, *trusted, dest, uid, gid):
            git_checks_out()
    return trusted


def _written_here(objects: GitObjects, root: str, trees: dict[bytes, bytes], dest: Path, uid: int, gid: int) -> bool:
    """The checked tree ``root`` written into ``dest`` as git writes it, owned by
    ``uid``; False, with nothing written, when it is larger than ``SMALL_TREE``
    entries or holds a name git might refuse or write otherwise. No attribute or
    configuration converts a blob on its way (``commit_trees`` refuses every
    attribute; ``checking_out`` disables ``core.autocrlf``): git writes each verbatim,
    0644 or 0755 by its mode under the umask 022 it is given, as this does."""
    made: list[tuple[int, bytes]] = []  # the directories: their parent's index (0: dest) and name
    files: list[tuple[int, bytes, bytes, bytes]] = []  # the parent's index, name, mode and blob
    below = [] if root == EMPTY_TREE else [(0, bytes.fromhex(root))]
    while below:
        at, sha = below.pop()
        for mode, name, child in ENTRY.findall(trees[sha]):
            if PLAIN_NAME.fullmatch(name) is None or (mode == LINK_MODE and name.lower().startswith(b".git")):
                return False
            if mode == TREE_MODE:
                made.append((at, name))
                below.append((len(made), child))
            else:
                files.append((at, name, mode, child))
        if len(made) + len(files) > SMALL_TREE:
            return False
    links = [(at, name, sha) for at, name, mode, sha in files if mode == LINK_MODE]
    targets = objects.bodies([sha for _at, _name, sha in links], b"blob")
    blobs = [(at, name, FILE_MODES[mode], sha) for at, name, mode, sha in files if mode != LINK_MODE]
    dirs: list[int] = []
    try:
        try:
            dirs.append(os.open(dest, DIR_FLAGS))
            os.fchown(dirs[0], uid, gid)
            for at, name in made:
                os.mkdir(name, 0o700, dir_fd=dirs[at])
                dirs.append(os.open(name, DIR_FLAGS, dir_fd=dirs[at]))
                _give(dirs[-1], 0o755, uid, gid)
            for (at, name, sha), (_sha, target) in zip(links, targets, strict=True):
                if git_hash(b"blob", target) != sha:
                    raise NotTrusted(f"object {sha.hex()} does not hash to its name")
                os.symlink(target, name, dir_fd=dirs[at])
                os.chown(name, uid, gid, dir_fd=dirs[at], follow_symlinks=False)
        except OSError as exc:
            raise _unwritten(exc) from None

        def opened(n: int) -> int:
            at, name, mode, _sha = blobs[n]
            fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=dirs[at])
            try:
                _give(fd, mode, uid, gid)
            except OSError:
                os.close(fd)
                raise
            return fd

        objects.write_blobs([sha for _at, _name, _mode, sha in blobs], opened)
    finally:
        for fd in dirs:
            os.close(fd)
    return True


def _give(fd: int, mode: int, uid: int, gid: int) -> None:
    # The mode set, not left to whatever umask the worker runs under.
    os.fchown(fd, uid, gid)
    os.fchmod(fd, mode)


def _unwritten(exc: OSError) -> NotTrusted:
    return NotTrusted(f"the checkout could not be written as the sandbox's: {exc}")


@contextmanager
def checking_out(uid: int, gid: int, git_dir: Path, commit: str, dest: Path) -> Iterator[None]:
    """``commit``'s tree written into the empty ``dest`` by git running as ``uid``
    while the body runs (the caller reads the commit's trees meanwhile): no file needs
    handing over after. NotTrusted when it cannot be done that way (no ``setpriv``, a
    worker that is not root, a path git refuses); ``dest`` is then empty again. A
    body that raises ends git's checkout, whose files the caller discards."""
    scratch = dest.parent / f".{dest.name}.checkout-index"
    scratch.mkdir()
    try:
        for owned in (dest, scratch):
            os.chown(owned, uid, gid)
        # Paths relative to the staging directory: git checks its directory with
        # access(), which ignores the capability, so it must not climb the worker's
        # private directories above (the staging directory is made searchable by all
        # under the usual umask; where it is not, the checkout is walked instead).
        env = git_environment(RemoteAccess(), "file", {"GIT_INDEX_FILE": os.path.relpath(scratch / "index", dest.parent)})
        git_run = subprocess.Popen(
            [
                *("setpriv", f"--reuid={uid}", f"--regid={gid}", "--clear-groups"),
                *("--inh-caps=+dac_read_search", "--ambient-caps=+dac_read_search", "--"),
                *("git", "-c", "core.autocrlf=false", "-c", "core.symlinks=true"),
                f"--git-dir={os.path.relpath(git_dir, dest.parent)}",
                *(f"--work-tree={dest.name}", "read-tree", "--reset", "-u", commit),
            ],
            cwd=dest.parent,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            umask=0o022,
        )
    except OSError as exc:
        shutil.rmtree(scratch, ignore_errors=True)
        empty(dest)
        raise NotTrusted(f"git could not run as uid {uid}: {exc}") from None
    try:
        try:
            yield
        except BaseException:
            git_run.kill()
            raise
        finally:
            try:
                # Its stderr is read only now: git waits meanwhile if it says much, never the body.
                error = git_run.communicate(timeout=GIT_TIMEOUT)[1]
            except subprocess.TimeoutExpired:
                git_run.kill()
                git_run.communicate()
                empty(dest)
                raise NotTrusted(f"git read-tree as uid {uid} took longer than {GIT_TIMEOUT} s") from None
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    if git_run.returncode != 0:
        empty(dest)
        raise NotTrusted(f"git read-tree as uid {uid} failed: {error.decode(errors='replace').strip()[:300]}")


def empty(dest: Path) -> None:
    """``dest`` emptied of a checkout, for the fallback to write it again."""
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir()
