"""A few pre-started sandbox containers per spec, so a run's first command does not
wait for a container to be created and started (issue 45, time to first command).

Each pooled container is created exactly as a run's main container is
(``spec.create_named``: the sandbox user, no network, read-only root, no capability,
the seccomp profile, the spec's limits, the reaper as PID 1), with one difference:
the directory bind-mounted read-only at /workspace is an empty slot directory of its
own, ``<root>/.pool/<owner>/<slot>``. The pool is keyed by the whole spec (image,
runtime, limits, network, scratch, seccomp profile), so a container handed to a run
already has that run's limits and spec label: nothing is changed in it but its name.

A run takes one (``ContainerPool.take``) in three steps, none of which the container
sees before its first command:

1. the container is renamed to the run's container name (one request to the engine);
   a name already held (the run has a container, to be reused) leaves the slot as it
   was, still nobody's;
2. the run's prepared workspace moves into the slot directory: each top-level entry
   is renamed into it (same filesystem, so no byte is copied and every inode stays),
   then the slot directory is renamed over the empty workspace directory. A bind
   mount follows the directory it was made from, so the container now sees the
   run's workspace, read-only, at /workspace; the host path is the run's again.
3. the run drives it as any of its containers. The engine's proof that the workspace
   is mounted read-only and nothing writable (``SandboxContainer._read_only_state``)
   was asked for when the pool started the container: mounts cannot change while a
   container exists. Its state then is the run's "before" for its first execution; a
   container restarted since looks restarted under that execution, which is retried
   in a fresh one, never taken as evidence.

A container goes to one run and is never returned to the pool: the run removes it
when it ends, as any of its containers. The pool refills in a background thread,
woken once the taken container's first execution has ended, or ``REFILL_DELAY_SECONDS``
after the take if that comes first: starting a container costs the engine and the
host far more than a command, and a run's first command right after its take ran
about 25 ms (40%) slower under the refill's start (bench/first_command.py).

Whose: a pooled container carries the managed, scope, role and spec labels of a run's
main container, no run label, and ``LABEL_POOL``, its owner's directory. The owner (one
process) holds an exclusive ``flock`` on ``<owner>/owner.lock`` while it lives; the
kernel drops it when the process dies, however it dies. ``containers_by_run``
(``sandbox.container.orphans``) reads a taken container's run from its name, leaves an
idle one alone while its owner lives, and lists an idle one of a dead owner as no
run's, so the sweep removes it. The pool is drained when its process ends
(``drain``: atexit, and the worker's shutdown signals, runs.apps)."""

from __future__ import annotations

import atexit
import contextlib
import errno
import fcntl
import logging
import os
import shutil
import socket
import stat
import threading
import uuid
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import docker
from docker.errors import APIError

from sandbox.container.client import new_client
from sandbox.container.engine import ENGINE_ERRORS, SandboxUnavailable
from sandbox.container.spec import (
    LABEL_MANAGED,
    LABEL_ROLE,
    LABEL_SCOPE,
    LABEL_SPEC,
    ROLE_MAIN,
    ContainerSpec,
    container_name,
    create_named,
    docker_name,
    remove_container,
    run_of_name,
    writable_mounts,
)

log = logging.getLogger(__name__)

POOL_DIR = ".pool"
LABEL_POOL = "harness.pool"
LOCK_FILE = "owner.lock"
# The longest a refill waits for the first execution in the container just taken.
REFILL_DELAY_SECONDS = 1.0
# Specs pooled at once: a worker's runs mostly share their policy's limits; a spec
# not asked for since two others were is drained.
MAX_SPECS = 2

Key = tuple[str, ContainerSpec]


@dataclass(frozen=True)
class Slot:
    container_id: str
    image_digest: str
    dir: Path
    # The engine's account of the running container once it showed the workspace
    # mount read-only and nothing mounted writable (``spec.writable_mounts``).
    state: dict[str, Any]


@dataclass(frozen=True)
class Taken:
    container_id: str
    image_digest: str
    # What the run's first execution would otherwise ask the engine for
    # (``SandboxContainer._read_only_state``): mounts cannot change while a container
    # exists, so the proof made when the pool started it holds.
    state: dict[str, Any]
    # For the container's first execution to call when it ends: the pool refills then.
    first_exec_ended: Callable[[], None]


def pool_name(scope: str, slot: str) -> str:
    """An idle pooled container's name: no run's container name ends in a slot id
    after ``pool.``, so ``idle_name`` tells the two apart."""
    return docker_name(f"harness-{scope}-pool.{slot}")


def idle_name(name: str, scope: str) -> bool:
    return name.startswith(docker_name(f"harness-{scope}-pool."))


def owner_alive(owner_dir: str) -> bool:
    """Whether the process that made the pool at ``owner_dir`` still lives: it holds
    the lock on its lock file as long as it does (a missing file: it drained and left)."""
    try:
        fd = os.open(os.path.join(owner_dir, LOCK_FILE), os.O_RDWR)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        return exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN)
    finally:
        os.close(fd)  # releases the lock if this process just took it
    return False


def move_workspace(workspace_dir: Path, slot_dir: Path) -> None:
    """Make the (empty, mounted) slot directory the workspace: its owner and mode
    become the workspace directory's, every entry moves into it, and it is renamed
    over the then empty workspace directory. A failure moves back what moved.

    The slot's path becomes a link to the workspace: the engine mounts a container's
    bind source by path again whenever it starts it, and the harness restarts a
    container whose processes it cannot kill (``SandboxContainer.kill_processes``),
    which must then mount the run's workspace as a run's own container would."""
    workspace_dir = workspace_dir.resolve()
    st = os.stat(workspace_dir)
    os.chown(slot_dir, st.st_uid, st.st_gid)
    os.chmod(slot_dir, stat.S_IMODE(st.st_mode))
    moved: list[str] = []
    try:
        for name in os.listdir(workspace_dir):
            os.rename(workspace_dir / name, slot_dir / name)
            moved.append(name)
        os.rename(slot_dir, workspace_dir)  # over an empty directory: one step
    except OSError:
        for name in reversed(moved):
            os.rename(slot_dir / name, workspace_dir / name)
        raise
    os.symlink(workspace_dir, slot_dir)


class ContainerPool:
    """Up to ``size`` idle containers for each of the last ``MAX_SPECS`` specs asked
    for, in one process. A spec is pooled from its first ``take`` on (that one misses)."""

    def __init__(self, root: Path, size: int, *, client_factory: Callable[[], docker.DockerClient] = new_client) -> None:
        self.root = root
        self.size = size
        self._client_factory = client_factory
        self._lock = threading.Lock()
        self._idle: OrderedDict[Key, list[Slot]] = OrderedDict()
        self._wake = threading.Event()
        self._closed = False
        self._thread: threading.Thread | None = None
        self._owner_dir: Path | None = None
        self._lock_fd: int | None = None
        # Containers runs took, by id, and the link each slot's path became: kept while
        # the container exists (the engine follows it when it restarts the container).
        self._links: dict[str, Path] = {}

    @property
    def owner_dir(self) -> Path | None:
        return self._owner_dir

    def idle(self, scope: str, spec: ContainerSpec) -> list[Slot]:
        with self._lock:
            return list(self._idle.get((scope, spec), []))

    # -- taking ------------------------------------------------------------------

    def take(
        self, run_id: str, role: str, workspace_dir: Path, spec: ContainerSpec, scope: str, client: docker.DockerClient
    ) -> Taken | None:
        """A running container for the run's ``role``, its workspace mounted and its
        name the run's, or None (the caller creates one): nothing idle for ``spec``, a
        role or run id the pool does not serve, or a step that failed."""
        if self.size <= 0 or self._closed or role != ROLE_MAIN:
            return None
        if run_of_name(container_name(scope, run_id, role), scope, role) != run_id:
            return None  # the sweep could not read the run back from the name
        key = (scope, spec)
        with self._lock:
            slots = self._wanted(key)
            slot = slots.pop(0) if slots and _same_filesystem(workspace_dir, slots[0].dir) else None
        taken = None if slot is None else self._hand_over(slot, key, run_id, role, workspace_dir, scope, client)
        if taken is None:
            self._refill()
            return None
        timer = threading.Timer(REFILL_DELAY_SECONDS, self._refill)
        timer.daemon = True
        timer.start()
        return taken

    def _hand_over(
        self, slot: Slot, key: Key, run_id: str, role: str, workspace_dir: Path, scope: str, client: docker.DockerClient
    ) -> Taken | None:
        """Steps 1 and 2 of a take (the module's docstring); None when one failed."""
        try:
            client.api.rename(slot.container_id, container_name(scope, run_id, role))
        except APIError as exc:
            if exc.status_code == 409:  # the run has a container already: the caller reuses or replaces it
                with self._lock:
                    self._idle.setdefault(key, []).insert(0, slot)
                return None
            self._discard(slot)
            return None
        except ENGINE_ERRORS:
            self._discard(slot)
            return None
        try:
            move_workspace(workspace_dir, slot.dir)
        except OSError as exc:
            log.warning("sandbox pool: could not move %s into slot %s (%s); starting a container instead", workspace_dir, slot.dir, exc)
            self._discard(slot)
            return None
        with self._lock:
            self._links[slot.container_id] = slot.dir
        return Taken(slot.container_id, slot.image_digest, slot.state, self._refill)

    def want(self, scope: str, spec: ContainerSpec) -> None:
        """Fill the pool for ``spec`` now, before any run takes from it."""
        with self._lock:
            self._wanted((scope, spec))
        self._refill()

    def _wanted(self, key: Key) -> list[Slot]:
        """The idle slots of ``key``, the spec now the last asked for (under the lock)."""
        slots = self._idle.setdefault(key, [])
        self._idle.move_to_end(key)
        return slots

    def _discard(self, slot: Slot) -> None:
        with contextlib.suppress(*ENGINE_ERRORS):
            remove_container(self._client_factory(), slot.container_id)
        with contextlib.suppress(OSError):
            slot.dir.rmdir()  # empty unless a move failed and could not move back

    # -- filling -------------------------------------------------------------------

    def _refill(self) -> None:
        with self._lock:
            if self._closed:
                return
            if self._thread is None:
                self._thread = threading.Thread(target=self._fill_forever, name="sandbox-pool", daemon=True)
                self._thread.start()
        self._wake.set()

    def _fill_forever(self) -> None:
        client = self._client_factory()
        while not self._closed:
            self._wake.wait()
            self._wake.clear()
            self._fill(client)
            self._unlink_gone(client)

    def _unlink_gone(self, client: docker.DockerClient) -> None:
        """Remove the links of taken containers that no longer exist (their runs ended)."""
        with self._lock:
            links = dict(self._links)
        if not links or self._owner_dir is None:
            return
        try:
            listed = client.containers.list(all=True, sparse=True, filters={"label": f"{LABEL_POOL}={self._owner_dir}"})
        except ENGINE_ERRORS:
            return
        alive = {container.attrs["Id"] for container in listed}
        for container_id, link in links.items():
            if container_id not in alive:
                with contextlib.suppress(OSError):
                    link.unlink()
                with self._lock:
                    self._links.pop(container_id, None)

    def _fill(self, client: docker.DockerClient) -> None:
        """Bring every pooled spec up to ``size`` idle containers. A spec whose container
        cannot be made (a runtime or image the engine lacks, an engine down) is no
        longer pooled: its runs start their own containers, meeting the failure
        themselves, and the next run of it asks for the spec again."""
        evicted: list[Slot] = []
        with self._lock:
            while len(self._idle) > MAX_SPECS:
                evicted += self._idle.popitem(last=False)[1]
            wanted = [(key, self.size - len(slots)) for key, slots in self._idle.items()]
        for slot in evicted:
            self._discard(slot)
        for key, missing in wanted:
            for _ in range(missing):
                if self._closed:
                    return
                try:
                    slot = self._create(client, *key)
                except (*ENGINE_ERRORS, SandboxUnavailable) as exc:
                    log.warning("sandbox pool: no container for %s on %s (%s); not pooled", key[1].image, key[1].runtime, exc)
                    with self._lock:
                        evicted = self._idle.pop(key, [])
                    for slot in evicted:
                        self._discard(slot)
                    break
                with self._lock:
                    kept = not self._closed and key in self._idle
                    if kept:
                        self._idle[key].append(slot)
                if not kept:
                    self._discard(slot)

    def _create(self, client: docker.DockerClient, scope: str, spec: ContainerSpec) -> Slot:
        owner_dir = self._owner()
        slot_id = uuid.uuid4().hex[:12]
        slot_dir = owner_dir / slot_id
        slot_dir.mkdir()
        labels = {LABEL_MANAGED: "1", LABEL_ROLE: ROLE_MAIN, LABEL_SCOPE: scope, LABEL_SPEC: spec.digest, LABEL_POOL: str(owner_dir)}
        try:
            container = create_named(client, pool_name(scope, slot_id), labels, str(slot_dir), spec)
            try:
                container.start()
                attrs: dict[str, Any] = client.api.inspect_container(container.id)
                problem = writable_mounts(attrs)
                if problem is not None:
                    raise SandboxUnavailable(problem)
            except (*ENGINE_ERRORS, SandboxUnavailable):
                remove_container(client, container.id)
                raise
        except (*ENGINE_ERRORS, SandboxUnavailable):
            slot_dir.rmdir()
            raise
        return Slot(container.id, container.attrs["Image"], slot_dir, attrs["State"])

    def _owner(self) -> Path:
        """This process's directory under the root, locked while the process lives
        (made on the first fill; owners that died before are cleared then)."""
        if self._owner_dir is None:
            base = self.root / POOL_DIR
            base.mkdir(parents=True, exist_ok=True)
            clear_dead_owners(base)
            owner_dir = base / f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
            owner_dir.mkdir()
            fd = os.open(owner_dir / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o600)
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            self._lock_fd, self._owner_dir = fd, owner_dir
        return self._owner_dir

    # -- draining ------------------------------------------------------------------

    def close(self) -> None:
        """Remove every idle container and this owner's directory; taken containers
        are their runs' and stay."""
        with self._lock:
            self._closed = True
            slots = [slot for slots in self._idle.values() for slot in slots]
            self._idle.clear()
            thread = self._thread
        self._wake.set()
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=60)  # a create in flight: its container is discarded when it returns
        for slot in slots:
            self._discard(slot)
        if self._owner_dir is not None:
            shutil.rmtree(self._owner_dir, ignore_errors=True)
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    def abandon(self) -> None:
        """In a child forked from the owner: the containers and the lock are the
        parent's; this process only lets go of its copy of the lock's descriptor."""
        self._closed = True
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None


def _same_filesystem(a: Path, b: Path) -> bool:
    try:
        return os.stat(a).st_dev == os.stat(b).st_dev
    except OSError:
        return False


def clear_dead_owners(base: Path) -> None:
    """Remove the (empty) slot directories of owners that died without draining;
    their containers are the sweep's."""
    with contextlib.suppress(OSError):
        for entry in base.iterdir():
            if entry.is_dir() and not owner_alive(str(entry)):
                shutil.rmtree(entry, ignore_errors=True)


# -- the process's pool, configured by the composition root (runs.apps) ----------------

_settings: tuple[Callable[[], Path], Callable[[], int]] | None = None
_pool: ContainerPool | None = None
_pool_lock = threading.Lock()


def configure(root: Callable[[], Path], size: Callable[[], int]) -> None:
    """Where slot directories go (the workspaces' filesystem) and how many idle
    containers per spec, read when the process first pools (a test's override too)."""
    global _settings
    _settings = (root, size)


def current() -> ContainerPool | None:
    """This process's pool, made on first use (in the process that drives runs, never
    in a parent that forks them), or None when none is configured or its size is 0."""
    global _pool
    if _settings is None:
        return None
    with _pool_lock:
        if _pool is None:
            root, size = _settings
            if size() <= 0:
                return None
            _pool = ContainerPool(root(), size())
        return _pool


def drain() -> None:
    """Remove this process's idle containers (at exit and at a worker's shutdown)."""
    global _pool
    with _pool_lock:
        pool, _pool = _pool, None
    if pool is not None:
        pool.close()


def _forget_in_child() -> None:
    global _pool, _pool_lock
    # A lock another thread of the parent held at the fork would never be released here.
    _pool_lock = threading.Lock()
    if _pool is not None:
        _pool.abandon()
    _pool = None


atexit.register(drain)
os.register_at_fork(after_in_child=_forget_in_child)
