"""A directory source copied in one pass that also hashes it and links the pristine
tree, the files created as the sandbox's uid's.

Preparing from a path used to copy the tree (``shutil.copytree``), hand every entry to
the sandbox's uid, walk the copy to hash every file and walk it again to hard-link the
pristine tree: four passes, the data read twice. Here each file is read once, written
to a file this process has just created (``O_EXCL``, in a directory it has just made,
which nobody else writes during preparation), owned by the sandbox's uid from its
creation, linked into the pristine tree, and its blob hash is that of the very bytes
written; the tree objects are made along the way, as the full walk would make them,
and become the revision index. The full walks before publish and completion (and
at every pickup but the one right after preparation) verify them all the same.

As ``copytree`` did: symlinks are copied as symlinks, special files and ``.git`` at
the top (and the cache directories) are left out, names outside the path grammar
refuse the source, and modes and modification times are kept (extended attributes
are not copied)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from sandbox.workspace.fileops import MAX_DEPTH, read_to_end
from sandbox.workspace.hashing import EMPTY_TREE, LINK_MODE, TREE_MODE, entry_mode, git_hash
from sandbox.workspace.revision import Entries, tree_body
from sandbox.workspace.sources import WorkspaceSourceError, check_name

CREATE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


class Copier:
    def __init__(self, src: Path, skip: set[str], uid: int, gid: int) -> None:
        self.src = src
        self.skip = skip
        self.uid, self.gid = uid, gid
        self.trees: dict[bytes, bytes] = {}

    def copy(self, dst: Path, pristine: Path) -> tuple[str, dict[bytes, bytes]]:
        """Copy into ``dst`` (which exists) with ``pristine`` as its hard links; the root
        tree and the tree objects of what was copied."""
        if not self.src.is_dir():
            raise WorkspaceSourceError(f"{self.src} is not a directory")
        os.chown(dst, self.uid, self.gid)
        root = self._dir(str(self.src), str(dst), str(pristine), "", 0)
        st = os.stat(self.src)
        os.chmod(dst, stat.S_IMODE(st.st_mode))
        os.utime(dst, ns=(st.st_atime_ns, st.st_mtime_ns))
        return (EMPTY_TREE if root is None else root.hex()), self.trees

    def _dir(self, src: str, dst: str, pristine: str, prefix: str, depth: int) -> bytes | None:
        if depth > MAX_DEPTH:
            raise WorkspaceSourceError(f"{prefix or '.'}: directories nested deeper than {MAX_DEPTH} levels")
        os.makedirs(pristine, exist_ok=True)
        entries: Entries = {}
        with os.scandir(src) as it:
            names = sorted(entry.name for entry in it)
        for name in names:
            check_name(prefix + name)
            source, target, linked = os.path.join(src, name), os.path.join(dst, name), os.path.join(pristine, name)
            st = os.lstat(source)
            if name in self.skip or (name == ".git" and not prefix):
                continue
            raw = os.fsencode(name)
            if stat.S_ISDIR(st.st_mode):
                os.mkdir(target)
                os.lchown(target, self.uid, self.gid)
                sub = self._dir(source, target, linked, f"{prefix}{name}/", depth + 1)
                os.chmod(target, stat.S_IMODE(st.st_mode))
                os.utime(target, ns=(st.st_atime_ns, st.st_mtime_ns))
                if sub is not None:
                    entries[raw] = (TREE_MODE, sub)
            elif stat.S_ISLNK(st.st_mode):
                link = os.readlink(source)
                os.symlink(link, target)
                os.lchown(target, self.uid, self.gid)
                os.utime(target, ns=(st.st_atime_ns, st.st_mtime_ns), follow_symlinks=False)
                os.symlink(link, linked)
                entries[raw] = (LINK_MODE, git_hash(b"blob", os.fsencode(link)))
            elif stat.S_ISREG(st.st_mode):
                read_fd = os.open(source, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
                try:
                    data = read_to_end(read_fd, st.st_size)
                finally:
                    os.close(read_fd)
                fd = os.open(target, CREATE, 0o600)
                try:
                    os.fchown(fd, self.uid, self.gid)
                    os.fchmod(fd, stat.S_IMODE(st.st_mode))
                    with os.fdopen(os.dup(fd), "wb") as out:
                        out.write(data)
                    os.utime(fd, ns=(st.st_atime_ns, st.st_mtime_ns))
                finally:
                    os.close(fd)
                os.link(target, linked)
                entries[raw] = (entry_mode(st), git_hash(b"blob", data))
        if not entries:
            return None
        body = tree_body(entries)
        sha = git_hash(b"tree", body)
        self.trees[sha] = body
        return sha
