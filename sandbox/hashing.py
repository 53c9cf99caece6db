"""Git tree hashes of a directory, computed in Python from directory fds.

No git process, index or ``.gitignore``/``.gitattributes``/nested-repository rule can
be influenced by the agent, and the value is the one ``git add -A && git write-tree``
gives for an ordinary tree (files, executable bits, symlinks; empty directories
omitted). Unlike git it also covers anything named ``.git`` inside the tree, so
nothing can hide there. This full walk is the verifier of the revision the
workspace keeps incrementally (``sandbox/revision.py``)."""

from __future__ import annotations

import hashlib
import os
import stat
import time
from collections.abc import Callable
from pathlib import Path

from sandbox import fileops

EMPTY_TREE = "4b825dc642cb6eb9a060e54bf8d69288fbee4904"
TREE_MODE = b"40000"
LINK_MODE = b"120000"
# A file changed within this window of a hash may change again within the same
# timestamp tick; it is re-read until it is older (git's "racy clean" problem).
RACY_NS = 1_000_000_000

BlobKey = tuple[str, int, int, int, int, int, int]
# Called with (sha, body) for every tree object a walk computes.
TreeSink = Callable[[bytes, bytes], None]


class TreeHasher:
    """Git tree hashes with a blob cache keyed on (path, inode, size, mtime, ctime,
    mode). ctime cannot be set from user space, so resetting mtime after an edit
    does not hide the edit."""

    def __init__(self, racy_ns: int = RACY_NS) -> None:
        self.racy_ns = racy_ns
        self._blobs: dict[BlobKey, bytes] = {}
        # What the last whole walk found allocated (as ``du`` counts: blocks, every
        # entry, never following symlinks): the disk quota's measurement, taken by the
        # walk that already stats every entry instead of by a walk of its own.
        self.allocated = 0
        self._walked = 0

    def tree(self, root: Path, sink: TreeSink | None = None) -> str:
        with fileops.opened_root(root) as fd:
            digest = self.tree_at(fd, "", 0, sink)
        return digest.hex() if digest is not None else EMPTY_TREE

    def tree_at(self, fd: int, prefix: str, depth: int, sink: TreeSink | None = None) -> bytes | None:
        """The tree hash of the directory ``fd`` (None: it holds no file)."""
        seen: dict[BlobKey, bytes] = {}
        self._walked = 0
        digest = self._tree(fd, prefix, depth, time.time_ns(), seen, sink)
        if not prefix:
            self._blobs = seen  # only a whole walk knows which cached blobs are gone
            self.allocated = self._walked
        else:
            self._blobs.update(seen)
        return digest

    def _tree(self, dir_fd: int, prefix: str, depth: int, started: int, seen: dict[BlobKey, bytes], sink: TreeSink | None) -> bytes | None:
        entries: list[tuple[bytes, bytes, bytes]] = []  # (sort key, mode, sha)
        for name, st in fileops.stat_entries(dir_fd, prefix, depth):
            self._walked += st.st_blocks * 512
            raw = os.fsencode(name)
            path = prefix + name
            if stat.S_ISDIR(st.st_mode):
                child = os.open(name, fileops.DIR_FLAGS, dir_fd=dir_fd)
                try:
                    sub = self._tree(child, path + "/", depth + 1, started, seen, sink)
                finally:
                    os.close(child)
                if sub is not None:
                    entries.append((raw + b"/", TREE_MODE, sub))
                continue
            key: BlobKey = (path, st.st_ino, st.st_dev, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_mode)
            sha = self._blobs.get(key)
            if sha is None:
                sha = git_hash(b"blob", content(dir_fd, name, st))
            if st.st_ctime_ns < started - self.racy_ns and st.st_mtime_ns < started - self.racy_ns:
                seen[key] = sha
            entries.append((raw, entry_mode(st), sha))
        if not entries:
            return None
        entries.sort(key=lambda e: e[0])
        body = b"".join(mode + b" " + key.rstrip(b"/") + b"\0" + sha for key, mode, sha in entries)
        digest = git_hash(b"tree", body)
        if sink is not None:
            sink(digest, body)
        return digest

    @staticmethod
    def entry(dir_fd: int, name: str, st: os.stat_result) -> tuple[bytes, bytes]:
        """The (mode, sha) of one non-directory entry, read now (no cache)."""
        return entry_mode(st), git_hash(b"blob", content(dir_fd, name, st))


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
