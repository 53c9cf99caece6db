"""The workspace revision, kept current along the paths the harness writes.

The revision is the git tree hash of the workspace (``TreeHasher``). Walking the whole
tree for every call costs time in proportion to the repository, so the tree objects
(the bodies git would store) are kept under ``index/objects/<sha>`` in the run's
private area, and ``index/HEAD`` names the root. Only the harness's own file tools
write the workspace, so after a write only the trees along the written paths are made
again: reading the revision costs one small file read, a write costs the depth of its
path (and the entries of the directories on it), whatever the size of the repository.
Nothing is held in memory, so a worker that restarts trusts nothing it did not persist.
``index/usage`` is kept the same way: the bytes the workspace holds (what the disk
quota limits), set by every full walk and moved by what each write adds or frees.

The full walk stays the judge. It builds the index at preparation (unless the
preparation proved the tree otherwise: a git checkout adopts the commit's own tree
objects, ``sandbox/workspace/checkout.py``), and ``verify`` runs it wherever a value is about to be relied on after a time nobody watched the
tree: when a worker picks a run up (unless that worker has just made the workspace,
``RunWorkspace.picked_up``), before publish is previewed or ships, and before a run
completes. A check is not walked after: it sees the workspace through a mount
the container proves read-only before every execution (``sandbox/container/sandbox_container.py``), so
it cannot have changed it, and anything else that changed it went around the
harness's tools, which the next of those walks finds. Before every write the paths
about to change are recorded in ``index/pending`` (``*`` around a check) and removed
once the index has caught up; a worker that finds the file left behind (a crash
mid-write or mid-check) brings those paths up to date from the disk and verifies the
whole index against a full walk. A disagreement, or a tree object that is lost or
damaged, is recorded in ``index/broken`` and every later read of the revision raises
``RevisionMismatch``: the run stops rather than going on with a value nobody
verified."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import secrets
import stat
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from core.ports import RevisionMismatch
from sandbox.workspace import fileops
from sandbox.workspace.hashing import EMPTY_TREE, LINK_MODE, TREE_MODE, TreeHasher, allocated, git_hash

WHOLE_TREE = "*"  # the pending marker of a check: a crash inside it is followed by a full walk

Entries = dict[bytes, tuple[bytes, bytes]]  # name -> (mode, sha)

log = logging.getLogger(__name__)


class RevisionIndex:
    def __init__(self, directory: Path, tree: Path, hasher: TreeHasher, *, staging: bool = False) -> None:
        """``staging``: the index of a workspace being prepared (or rebuilt) in its
        staging directory, which nobody else reads or writes and a crash discards
        whole: its files are written in place, not renamed into place, the record of
        a write under way is kept in memory, not in ``pending`` (a crash takes both),
        and the trees it wrote or read are kept too, as are its small files until
        ``persist`` writes them."""
        self.dir = directory
        self.tree = tree
        self.objects = directory / "objects"
        self.hasher = hasher
        self._put_file = _plain_write if staging else _atomic_write
        self._staging = staging
        self._pending: list[str] | None = None  # staging's record of a write under way
        # Staging's trees as written or read (and checked) once: nobody else writes
        # the directory, so each need not be read and hashed again at every write.
        self._trees: dict[bytes, Entries] | None = {} if staging else None
        # Staging's small files (HEAD, BASE, usage, broken) as read or written, kept
        # until ``persist``: a replayed write read or wrote them five times, and the
        # rebuild's check of its revision after it twice more.
        self._kept: dict[str, str | None] | None = {} if staging else None
        self._changed: set[str] = set()
        # As strings, joined by hand: a write reads or writes about ten of these small
        # files, and pathlib's joins cost more than the system calls (bench/repo_scale.py).
        self._dir = os.fspath(directory)
        self._objects = os.fspath(self.objects)

    # -- reading the revision ------------------------------------------------------

    def head(self) -> str:
        """The current revision. Raises RevisionMismatch once verification failed;
        FileRefused/OSError/RecursionError when the tree must be walked and cannot be."""
        broken = self._marker("broken")
        if broken is not None:
            raise RevisionMismatch(broken)
        pending = self._read_pending()
        if pending is not None:
            self._recover(pending, crashed=True)
        head = self._read("HEAD")
        return head if head is not None else self.rebuild()

    def start(self) -> str:
        """At preparation, while the tree is the pristine source: the full walk's
        value is both the base and the current revision."""
        head = self.rebuild()
        self._write("BASE", head)
        return head

    def adopt(self, root: str, trees: dict[bytes, bytes]) -> str:
        """At preparation, when the tree is a checkout proven to be ``root`` without a
        walk (``sandbox/workspace/checkout.py``): its tree objects become the index, ``root``
        the base and current revision. ``usage`` is counted when first asked for."""
        self.objects.mkdir(parents=True, exist_ok=True)
        for sha, body in trees.items():
            self._put_file(self._objects, f"{self._objects}/{sha.hex()}", body)
        self._write("HEAD", root)
        self._write("BASE", root)
        return root

    def base(self, pristine: Path) -> str:
        base = self._read("BASE")
        if base is None:
            base = TreeHasher().tree(pristine, self._store_body)
            self._write("BASE", base)
        return base

    # -- keeping it current ----------------------------------------------------------

    def rebuild(self) -> str:
        """The revision from a full walk of the tree, which becomes the index."""
        self._remove("HEAD")  # a walk that fails leaves no value standing
        head = self.hasher.tree(self.tree, self._store_body)
        self._write("HEAD", head)
        self._write("usage", str(self.hasher.allocated))
        return head

    def verify(self) -> str:
        """A full walk that must agree with the index. A tree that cannot be walked
        (nested past the limit, say) agrees with nothing."""
        broken = self._marker("broken")
        if broken is not None:
            raise RevisionMismatch(broken)
        expected = self._read("HEAD")
        try:
            if expected is None:
                return self.rebuild()  # no value stands that the walk could contradict
            walked = self.hasher.tree(self.tree)
        except (fileops.FileRefused, OSError, RecursionError) as exc:
            raise RevisionMismatch(f"the workspace cannot be walked to verify its revision: {exc}") from None
        if walked != expected:
            reason = f"the workspace's maintained revision {expected} differs from a full walk of it ({walked})"
            self._write("broken", reason)
            raise RevisionMismatch(reason)
        self._write("usage", str(self.hasher.allocated))
        return walked

    def usage(self) -> int:
        """The bytes the workspace holds, without a walk (when no full walk has
        recorded it yet, a workspace adopted at preparation: the entries' status
        alone, no file read). A write's new directories are not counted until the
        next full walk: a few blocks each, against a quota in megabytes."""
        text = self._read("usage")
        if text is None:
            try:
                counted = allocated(self.tree)
            except (fileops.FileRefused, OSError, RecursionError):
                self.verify()  # which fails, saying why, as for any tree it cannot walk
                return int(self._read("usage") or "0")
            self._write("usage", str(counted))
            return counted
        return int(text)

    @contextmanager
    def writing(self, paths: Sequence[str]) -> Iterator[None]:
        """Around a write of ``paths`` by the harness (or, with WHOLE_TREE, around a
        check, which sees the tree read-only and is not walked after): the index
        follows the written paths on the disk after it, and a crash inside leaves a
        record that has the next worker walk the whole tree."""
        broken = self._marker("broken")
        if broken is not None:
            raise RevisionMismatch(broken)
        earlier = self._read_pending()
        if earlier is not None:  # recovered first: the marker below must not hide it
            self._recover(earlier, crashed=True)
        written = [p for p in paths if p != WHOLE_TREE]
        if written and self._read("usage") is None:
            # No size recorded yet (a workspace adopted at preparation): the first ask
            # counts the tree as it is then, so there is nothing to move.
            written = []
        before = self._allocated(written)
        self._set_pending(list(paths))
        try:
            yield
        finally:
            try:
                after = self._recover(list(paths), crashed=False)
                if written:
                    self._add_usage((self._allocated(written) if after is None else after) - before)
            except (fileops.FileRefused, OSError, RecursionError) as exc:
                # The marker stays: the next read of the revision tries again and
                # meanwhile finds the tree unhashable, never the old value.
                log.warning("revision index of %s not brought up to date: %s", self.tree, exc)

    def _recover(self, paths: list[str], *, crashed: bool) -> int | None:
        """Bring the index up to date with ``paths`` after they were written; after a
        crash mid-write or mid-check, the whole tree is verified too. What the paths
        occupy now (``_update``).

        A check that ended is not walked after (the module's docstring says why):
        what it could have changed it saw read-only."""
        occupied = self._update([p for p in paths if p != WHOLE_TREE])
        self._set_pending(None)
        if crashed:
            self.verify()
        return occupied

    def _update(self, paths: Sequence[str]) -> int | None:
        """The index follows ``paths`` as they are on the disk now; what they occupy
        there, as ``_allocated`` counts it, from the same look (None: not looked, with
        no value standing)."""
        if not paths:
            return 0
        head = self._read("HEAD")
        if head is None:
            return None  # no value stands: the next read walks the tree
        root = None if head == EMPTY_TREE else bytes.fromhex(head)
        occupied = 0
        with fileops.opened_root(self.tree) as root_fd:
            for path in paths:
                leaf, blocks = self._leaf(root_fd, path)
                occupied += blocks * 512
                root = self._put(root, [os.fsencode(p) for p in path.split("/")], leaf)
        self._write("HEAD", EMPTY_TREE if root is None else root.hex())
        return occupied

    def _leaf(self, root_fd: int, path: str) -> tuple[tuple[bytes, bytes] | None, int]:
        """What ``path`` is on the disk now, as a tree entry (None: absent), and its blocks."""
        parts = path.split("/")
        try:
            with fileops.opened_dir(root_fd, parts[:-1]) as dir_fd:
                try:
                    st = os.stat(parts[-1], dir_fd=dir_fd, follow_symlinks=False)
                except FileNotFoundError:
                    return None, 0
                if not stat.S_ISDIR(st.st_mode):
                    return TreeHasher.entry(dir_fd, parts[-1], st), st.st_blocks
                child = os.open(parts[-1], fileops.DIR_FLAGS, dir_fd=dir_fd)
                try:
                    sub = TreeHasher().tree_at(child, path + "/", len(parts), self._store_body)
                finally:
                    os.close(child)
                return None if sub is None else (TREE_MODE, sub), st.st_blocks
        except fileops.FileRefused:
            return None, 0  # a directory on the way is missing (or not a directory): nothing there

    def _put(self, tree: bytes | None, parts: list[bytes], leaf: tuple[bytes, bytes] | None) -> bytes | None:
        entries = self._load(tree)
        name = parts[0]
        old = entries.get(name)
        if len(parts) == 1:
            new = leaf
        else:
            below = old[1] if old is not None and old[0] == TREE_MODE else None
            sub = self._put(below, parts[1:], leaf)
            new = (TREE_MODE, sub) if sub is not None else (old if below is None else None)
        if new is None:
            entries.pop(name, None)
        else:
            entries[name] = new
        return self._store(entries) if entries else None

    def _allocated(self, paths: Sequence[str]) -> int:
        """What ``paths`` occupy on the disk now (absent, or unreachable: nothing)."""
        if not paths:
            return 0
        total = 0
        with fileops.opened_root(self.tree) as root_fd:
            for path in paths:
                parts = path.split("/")
                try:
                    with fileops.opened_dir(root_fd, parts[:-1]) as dir_fd:
                        total += os.stat(parts[-1], dir_fd=dir_fd, follow_symlinks=False).st_blocks * 512
                except (fileops.FileRefused, FileNotFoundError):
                    continue
        return total

    def _add_usage(self, delta: int) -> None:
        text = self._read("usage")
        if text is not None and delta:
            self._write("usage", str(max(0, int(text) + delta)))

    # -- what changed between two revisions ------------------------------------------

    def changes(self, old: str, new: str) -> list[tuple[str, bytes | None, bytes | None]]:
        """(path, old blob sha, new blob sha) of every file that differs, found by
        descending only into the trees that differ."""
        out: list[tuple[str, bytes | None, bytes | None]] = []
        self._diff(_sha(old), _sha(new), "", out)
        return sorted(out)

    def _diff(self, old: bytes | None, new: bytes | None, prefix: str, out: list[tuple[str, bytes | None, bytes | None]]) -> None:
        if old == new:
            return
        left, right = self._load(old), self._load(new)
        for name in set(left) | set(right):
            a, b = left.get(name), right.get(name)
            if a == b:
                continue
            path = prefix + os.fsdecode(name)
            a_tree = a[1] if a is not None and a[0] == TREE_MODE else None
            b_tree = b[1] if b is not None and b[0] == TREE_MODE else None
            if a_tree is not None or b_tree is not None:
                self._diff(a_tree, b_tree, path + "/", out)
            a_blob = a if a is not None and a_tree is None else None
            b_blob = b if b is not None and b_tree is None else None
            if a_blob is None and b_blob is None:
                continue
            # A change of the executable bit alone is no change of content (a patch
            # cannot express it): only content and the symlink kind count.
            if a_blob is None or b_blob is None or a_blob[1] != b_blob[1] or (a_blob[0] == LINK_MODE) != (b_blob[0] == LINK_MODE):
                out.append((path, None if a_blob is None else a_blob[1], None if b_blob is None else b_blob[1]))

    def entry(self, revision: str, path: str) -> tuple[bytes, bytes] | None:
        """The (mode, sha) ``path`` has in ``revision``."""
        tree = _sha(revision)
        parts = [os.fsencode(p) for p in path.split("/")]
        for index, name in enumerate(parts):
            found = self._load(tree).get(name)
            if found is None or index == len(parts) - 1:
                return found
            if found[0] != TREE_MODE:
                return None
            tree = found[1]
        return None

    # -- tree objects ----------------------------------------------------------------

    def _load(self, sha: bytes | None) -> Entries:
        if sha is None:
            return {}
        if self._trees is not None and sha in self._trees:
            return dict(self._trees[sha])
        body = _read_bytes(f"{self._objects}/{sha.hex()}")
        if body is None or git_hash(b"tree", body) != sha:
            reason = f"the revision index lost or damaged its tree object {sha.hex()}"
            self._write("broken", reason)
            raise RevisionMismatch(reason)
        entries = parse_tree(body)
        if self._trees is not None:
            self._trees[sha] = dict(entries)
        return entries

    def _store(self, entries: Entries) -> bytes:
        body = tree_body(entries)
        sha = git_hash(b"tree", body)
        self._store_body(sha, body)
        if self._trees is not None:
            self._trees[sha] = dict(entries)
        return sha

    def _store_body(self, sha: bytes, body: bytes) -> None:
        target = f"{self._objects}/{sha.hex()}"
        if not os.path.exists(target):
            self._put_file(self._objects, target, body)

    # -- small files -----------------------------------------------------------------

    def persist(self) -> None:
        """Staging's small files written as they stand, before the staging directory
        becomes the workspace that other processes read."""
        if self._kept is None:
            return
        for name in sorted(self._changed):
            text = self._kept[name]
            if text is None:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(f"{self._dir}/{name}")
            else:
                self._put_file(self._dir, f"{self._dir}/{name}", text.encode())
        self._changed.clear()

    def _read(self, name: str) -> str | None:
        if self._kept is not None and name in self._kept:
            return self._kept[name]
        body = _read_bytes(f"{self._dir}/{name}")
        text = None if body is None else body.decode()
        if self._kept is not None:
            self._kept[name] = text
        return text

    def _write(self, name: str, text: str) -> None:
        if self._kept is not None:
            self._kept[name] = text
            self._changed.add(name)
        else:
            self._put_file(self._dir, f"{self._dir}/{name}", text.encode())

    def _marker(self, name: str) -> str | None:
        """``broken`` or ``pending``, files that are there only while something is wrong
        or under way: looked for first, without the exception a failed open raises
        (several thousand instructions, twice in every read of the revision)."""
        if self._kept is None and not os.access(f"{self._dir}/{name}", os.F_OK):
            return None
        return self._read(name)

    def _read_pending(self) -> list[str] | None:
        if self._staging:
            return self._pending
        text = self._marker("pending")
        return None if text is None else list(json.loads(text))

    def _set_pending(self, paths: list[str] | None) -> None:
        if self._staging:
            self._pending = paths
        elif paths is None:
            self._remove("pending")
        else:
            self._write("pending", json.dumps(paths))

    def _remove(self, name: str) -> None:
        if self._kept is not None:
            self._kept[name] = None
            self._changed.add(name)
            return
        with contextlib.suppress(FileNotFoundError):
            os.unlink(f"{self._dir}/{name}")


def parse_tree(body: bytes) -> Entries:
    """A tree object's entries (ValueError for a body that is not one)."""
    entries: Entries = {}
    at = 0
    while at < len(body):
        space = body.index(b" ", at)
        nul = body.index(b"\0", space)
        if nul + 21 > len(body):
            raise ValueError("a tree entry is cut short")
        entries[body[space + 1 : nul]] = (body[at:space], body[nul + 1 : nul + 21])
        at = nul + 21
    return entries


def tree_body(entries: Entries) -> bytes:
    """The tree object of ``entries``, in git's order (a tree sorts as its name and "/")."""
    ordered = sorted(entries.items(), key=lambda item: item[0] + b"/" if item[1][0] == TREE_MODE else item[0])
    return b"".join(mode + b" " + name + b"\0" + sha for name, (mode, sha) in ordered)


def _sha(revision: str) -> bytes | None:
    return None if revision == EMPTY_TREE else bytes.fromhex(revision)


def _read_bytes(path: str) -> bytes | None:
    """The whole file, or None when there is none."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    try:
        chunks = []
        while chunk := os.read(fd, 1 << 16):
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def _plain_write(directory: str, target: str, data: bytes, *, new: bool = False) -> None:
    """``data`` written over ``target`` in place (only as a new file, with ``new``), in
    ``directory`` (made when missing)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC | (os.O_EXCL if new else os.O_TRUNC)
    try:
        fd = os.open(target, flags, 0o644)
    except FileNotFoundError:
        os.makedirs(directory, exist_ok=True)
        fd = os.open(target, flags, 0o644)
    try:
        left = memoryview(data)
        while left:
            left = left[os.write(fd, left) :]
    finally:
        os.close(fd)


def _atomic_write(directory: str, target: str, data: bytes) -> None:
    """``data`` renamed into place at ``target`` in ``directory`` (made when missing):
    a crash never leaves half a file under the name."""
    tmp = f"{directory}/.{os.path.basename(target)}.{secrets.token_hex(4)}.tmp"
    _plain_write(directory, tmp, data, new=True)
    os.replace(tmp, target)
