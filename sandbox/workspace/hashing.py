"""Git tree hashes of a directory, computed in Python from directory fds.

No git process, index or ``.gitignore``/``.gitattributes``/nested-repository rule can
be influenced by the agent, and the value is the one ``git add -A && git write-tree``
gives for an ordinary tree (files, executable bits, symlinks; empty directories
omitted). Unlike git it also covers anything named ``.git`` inside the tree, so
nothing can hide there. This full walk is the verifier of the revision the
workspace keeps incrementally (``sandbox/workspace/revision.py``)."""

from __future__ import annotations

import hashlib
import marshal
import os
import select
import stat
import subprocess
import sys
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from sandbox.workspace import fileops

EMPTY_TREE = "4b825dc642cb6eb9a060e54bf8d69288fbee4904"
TREE_MODE = b"40000"
LINK_MODE = b"120000"
# A file changed within this window of a hash may change again within the same
# timestamp tick; it is re-read until it is older (git's "racy clean" problem).
RACY_NS = 1_000_000_000

# A walk starts its helpers once it has seen this many entries with directories left:
# a helper's start (~0.1 s of an interpreter) is then a small part of the walk.
PARALLEL_AFTER = 5_000
MAX_HELPERS = 3
HELPER_BACKLOG = 2  # directories sent ahead, so a helper never waits for its next one
PROJECT_ROOT = Path(__file__).resolve().parents[2]

BlobKey = tuple[str, int, int, int, int, int, int]
Blobs = dict[BlobKey, bytes]
TreeEntry = tuple[bytes, bytes, bytes]  # (sort key, mode, sha)
# (directory parts, prefix, depth, walk started, racy window, cached blobs)
Task = tuple[tuple[str, ...], str, int, int, int, Blobs]
# (file entries, subdirectory names, blobs to cache, bytes allocated)
Hashed = tuple[list[TreeEntry], list[str], Blobs, int]
# Called with (sha, body) for every tree object a walk computes.
TreeSink = Callable[[bytes, bytes], None]


class TreeHasher:
    """Git tree hashes with a blob cache keyed on (path, inode, size, mtime, ctime,
    mode). ctime cannot be set from user space, so resetting mtime after an edit
    does not hide the edit.

    A walk hashes one directory at a time (its files; its subdirectories become
    directories to hash). Once it has seen ``parallel_after`` entries with
    directories still to go, it starts ``helpers`` helper processes
    (``sandbox/workspace/walker.py``; by default ``spare_cores()``) that take directories from
    the same queue, so a skewed tree still balances; a small tree never pays for them."""

    def __init__(self, racy_ns: int = RACY_NS, parallel_after: int = PARALLEL_AFTER, helpers: int | None = None) -> None:
        self.racy_ns = racy_ns
        self.parallel_after = parallel_after
        self.helpers = helpers  # None: as many as the machine has cores to spare (spare_cores)
        # By directory (its prefix), as the walk hashes them: what one directory's
        # hashing needs is what goes to the process that hashes it.
        self._blobs: dict[str, Blobs] = {}
        # What the last whole walk found allocated (as ``du`` counts: blocks, every
        # entry, never following symlinks): the disk quota's measurement, taken by the
        # walk that already stats every entry instead of by a walk of its own.
        self.allocated = 0
        # The directories the last walk's helpers hashed (0: it ran alone).
        self.delegated = 0

    def tree(self, root: Path, sink: TreeSink | None = None) -> str:
        with fileops.opened_root(root) as fd:
            digest = self.tree_at(fd, "", 0, sink)
        return digest.hex() if digest is not None else EMPTY_TREE

    def tree_at(self, fd: int, prefix: str, depth: int, sink: TreeSink | None = None) -> bytes | None:
        """The tree hash of the directory ``fd`` (None: it holds no file)."""
        walk = _Walk(self, self._blobs, fd, prefix, depth, sink)
        try:
            digest = walk.run()
        finally:
            walk.close()
        self.delegated = walk.delegated
        if not prefix:
            self._blobs = walk.seen  # only a whole walk knows which cached blobs are gone
            self.allocated = walk.walked
        else:
            self._blobs.update(walk.seen)
        return digest

    @staticmethod
    def entry(dir_fd: int, name: str, st: os.stat_result) -> tuple[bytes, bytes]:
        """The (mode, sha) of one non-directory entry, read now (no cache)."""
        return entry_mode(st), git_hash(b"blob", content(dir_fd, name, st))


def allocated(root: Path) -> int:
    """What a whole walk's ``TreeHasher.allocated`` finds, from the entries' status
    alone: no file is read, for a tree whose hashes are known otherwise."""
    with fileops.opened_root(root) as fd:
        return _allocated_at(fd, "", 0)


def _allocated_at(dir_fd: int, prefix: str, depth: int) -> int:
    if depth > fileops.MAX_DEPTH:
        raise fileops.FileRefused(f"{prefix or '.'}: directories nested deeper than {fileops.MAX_DEPTH} levels")
    total = 0
    below = []
    with os.scandir(dir_fd) as it:
        for entry in it:
            try:
                total += entry.stat(follow_symlinks=False).st_blocks * 512
            except FileNotFoundError:
                continue  # removed meanwhile, as the walk leaves it out
            if entry.is_dir(follow_symlinks=False):
                below.append(entry.name)
    for name in below:
        child = os.open(name, fileops.DIR_FLAGS, dir_fd=dir_fd)
        try:
            total += _allocated_at(child, f"{prefix}{name}/", depth + 1)
        finally:
            os.close(child)
    return total


@dataclass
class _Dir:
    """A directory of the walk: its entries so far, and how many subdirectories are
    still being hashed."""

    parts: tuple[str, ...]  # below the walk's root
    depth: int
    parent: _Dir | None
    name: bytes
    entries: list[TreeEntry] = field(default_factory=list)
    waiting: int = 0

    @property
    def prefix(self) -> str:
        return "".join(part + "/" for part in self.parts)


class _Walk:
    def __init__(self, hasher: TreeHasher, cached: dict[str, Blobs], fd: int, prefix: str, depth: int, sink: TreeSink | None) -> None:
        self.hasher = hasher
        self.cached = cached
        self.fd = fd
        self.prefix = prefix
        self.sink = sink
        self.started = time.time_ns()
        self.seen: dict[str, Blobs] = {}
        self.walked = 0
        self.entries_seen = 0
        self.delegated = 0
        self.queue: deque[_Dir] = deque([_Dir((), depth, None, b"")])
        # What a helper could not hash, for this process alone: its error, if any, is the walk's.
        self.mine: list[_Dir] = []
        self.helpers: list[_Helper] = []
        self.spawned = False
        self.result: bytes | None = None
        self.done = False

    def run(self) -> bytes | None:
        while not self.done:
            if not self.spawned and self.queue and self.entries_seen >= self.hasher.parallel_after:
                self.spawned = True
                wanted = spare_cores() if self.hasher.helpers is None else self.hasher.helpers
                self.helpers = _Helper.start_for(self.fd, wanted)
            for helper in self.helpers:
                while len(helper.tasks) < HELPER_BACKLOG and self.queue:
                    directory = self.queue.popleft()  # the shallowest: most likely the most below it
                    helper.send(directory, self._task(directory))
            self._collect(block=not self.queue and not self.mine)
            if self.mine or self.queue:
                directory = self.mine.pop() if self.mine else self.queue.pop()  # depth first: few directories wait at once
                self._hashed(directory, self._hash(directory))
        return self.result

    def _task(self, directory: _Dir) -> Task:
        prefix = self.prefix + directory.prefix
        return (directory.parts, prefix, directory.depth, self.started, self.hasher.racy_ns, self.cached.get(prefix, {}))

    def _hash(self, directory: _Dir) -> Hashed:
        return hash_directory(self.fd, *self._task(directory))

    def _collect(self, *, block: bool) -> None:
        """Take what the helpers finished; a directory a helper could not hash is
        hashed here, so that what fails the walk fails it exactly as it fails a walk
        without helpers."""
        busy = [helper for helper in self.helpers if helper.tasks]
        if not busy:
            return
        readable, writable, _ = select.select([h.read_fd for h in busy], [h.write_fd for h in busy if h.outgoing], [], None if block else 0)
        for helper in busy:
            if helper.write_fd in writable:
                helper.flush()
        for helper in [h for h in busy if h.read_fd in readable]:
            for directory, hashed in helper.receive():
                if hashed is None:
                    self.mine.append(directory)
                else:
                    self.delegated += 1
                    self._hashed(directory, hashed)
        for helper in [h for h in busy if h.failed]:
            self.mine.extend(helper.tasks.values())  # a helper that is gone leaves them here
            helper.tasks.clear()
            self.helpers.remove(helper)
            helper.close()

    def _hashed(self, directory: _Dir, hashed: Hashed) -> None:
        entries, subdirectories, seen, walked = hashed
        self.entries_seen += len(entries) + len(subdirectories)
        self.walked += walked
        if seen:
            self.seen[self.prefix + directory.prefix] = seen
        directory.entries.extend(entries)
        directory.waiting = len(subdirectories)
        for name in subdirectories:
            self.queue.append(_Dir((*directory.parts, name), directory.depth + 1, directory, os.fsencode(name)))
        node: _Dir | None = directory
        while node is not None and node.waiting == 0:
            digest = self._finish(node)
            parent = node.parent
            if parent is None:
                self.result, self.done = digest, True
                return
            if digest is not None:
                parent.entries.append((node.name + b"/", TREE_MODE, digest))
            parent.waiting -= 1
            node = parent

    def _finish(self, directory: _Dir) -> bytes | None:
        if not directory.entries:
            return None
        directory.entries.sort(key=lambda e: e[0])
        body = b"".join(mode + b" " + key.rstrip(b"/") + b"\0" + sha for key, mode, sha in directory.entries)
        digest = git_hash(b"tree", body)
        if self.sink is not None:
            self.sink(digest, body)
        return digest

    def close(self) -> None:
        for helper in self.helpers:
            helper.close()


def hash_directory(root_fd: int, parts: tuple[str, ...], prefix: str, depth: int, started: int, racy_ns: int, cached: Blobs) -> Hashed:
    """One directory's share of a walk, here or in a helper: its files' tree entries,
    its subdirectories' names, the blobs to cache and what its entries allocate.
    The directory is opened from the walk's root, one component at a time, never
    following a symlink."""
    fd = os.dup(root_fd)
    try:
        for name in parts:
            child = os.open(name, fileops.DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = child
        entries: list[TreeEntry] = []
        subdirectories: list[str] = []
        seen: Blobs = {}
        walked = 0
        for name, st in fileops.stat_entries(fd, prefix, depth):
            walked += st.st_blocks * 512
            if stat.S_ISDIR(st.st_mode):
                subdirectories.append(name)
                continue
            key: BlobKey = (prefix + name, st.st_ino, st.st_dev, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_mode)
            sha = cached.get(key)
            if sha is None:
                sha = git_hash(b"blob", content(fd, name, st))
            if st.st_ctime_ns < started - racy_ns and st.st_mtime_ns < started - racy_ns:
                seen[key] = sha
            entries.append((os.fsencode(name), entry_mode(st), sha))
        return entries, subdirectories, seen, walked
    finally:
        os.close(fd)


class _Helper:
    """A helper process of a walk and the directories it was sent. Frames both ways
    are a length and a ``marshal`` body; the parent never blocks on a helper's pipe
    while it has directories of its own to hash."""

    def __init__(self, root_fd: int) -> None:
        self.process = subprocess.Popen(
            # -S: no site-packages to import; the helper needs the standard library only.
            [sys.executable, "-S", "-m", "sandbox.workspace.walker", str(root_fd)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            pass_fds=(root_fd,),
            cwd=PROJECT_ROOT,
        )
        assert self.process.stdin is not None and self.process.stdout is not None
        self.write_fd = self.process.stdin.fileno()
        self.read_fd = self.process.stdout.fileno()
        os.set_blocking(self.write_fd, False)
        os.set_blocking(self.read_fd, False)
        self.tasks: dict[int, _Dir] = {}
        self.outgoing = b""
        self.incoming = b""
        self.failed = False
        self._next = 0

    @classmethod
    def start_for(cls, root_fd: int, count: int) -> list[_Helper]:
        try:
            return [cls(root_fd) for _ in range(count)]
        except OSError:
            return []  # no helper can start: the walk goes on alone

    def send(self, directory: _Dir, task: Task) -> None:
        self._next += 1
        self.tasks[self._next] = directory
        self.outgoing += frame(marshal.dumps((self._next, *task)))
        self.flush()

    def flush(self) -> None:
        try:
            while self.outgoing:
                written = os.write(self.write_fd, self.outgoing)
                self.outgoing = self.outgoing[written:]
        except BlockingIOError:
            pass
        except OSError:
            self.failed = True

    def receive(self) -> Iterator[tuple[_Dir, Hashed | None]]:
        """What arrived: each directory with its result (None: hash it elsewhere)."""
        try:
            while chunk := os.read(self.read_fd, 1 << 20):
                self.incoming += chunk
            self.failed = True  # end of file: the helper is gone
        except BlockingIOError:
            pass
        except OSError:
            self.failed = True
        while len(self.incoming) >= 4:
            size = int.from_bytes(self.incoming[:4], "big")
            if len(self.incoming) < 4 + size:
                break
            body, self.incoming = self.incoming[4 : 4 + size], self.incoming[4 + size :]
            number, ok, *hashed = marshal.loads(body)  # noqa: S302 - from the helper this walk started, over its own pipe
            directory = self.tasks.pop(number)
            yield directory, (tuple(hashed) if ok else None)

    def close(self) -> None:
        self.process.kill()
        self.process.wait()
        for stream in (self.process.stdin, self.process.stdout):
            if stream is not None:
                stream.close()


def spare_cores() -> int:
    """Helpers a walk starts: one per further core, at most MAX_HELPERS, whatever the
    load: at loads of 1.7 to 4 on 2 cores, interleaved runs found a walk with a helper
    from 20% slower to 35% faster than one without, nothing a load rule could pick by."""
    return min(len(os.sched_getaffinity(0)) - 1, MAX_HELPERS)


def frame(body: bytes) -> bytes:
    return len(body).to_bytes(4, "big") + body


def entry_mode(st: os.stat_result) -> bytes:
    if stat.S_ISLNK(st.st_mode):
        return LINK_MODE
    if stat.S_ISREG(st.st_mode):
        return b"100755" if st.st_mode & stat.S_IXUSR else b"100644"
    return b"100644"


def content(dir_fd: int, name: str, st: os.stat_result) -> bytes:
    """What git would store for the entry: a file's bytes, a symlink's target."""
    if stat.S_ISLNK(st.st_mode):
        return os.fsencode(os.readlink(name, dir_fd=dir_fd))
    if not stat.S_ISREG(st.st_mode):
        # FIFOs, sockets: git cannot store them, but their presence must still
        # change the revision.
        return f"harness-special-file mode={st.st_mode:o}".encode()
    fd = os.open(name, fileops.FILE_FLAGS, dir_fd=dir_fd)
    try:
        return fileops.read_to_end(fd, st.st_size)
    finally:
        os.close(fd)


def git_hash(kind: bytes, body: bytes) -> bytes:
    return hashlib.sha1(kind + b" " + str(len(body)).encode() + b"\0" + body, usedforsecurity=False).digest()
