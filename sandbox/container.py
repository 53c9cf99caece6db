"""One Docker container per run, and executions inside it.

The container is created with the sandbox defaults (docs/design.md, Trust boundaries) and the
run's policy limits; its PID 1 is a tiny reaper so orphaned processes (a fork bomb's
debris) are collected and do not pin the pids limit. Every execution:

- runs as uid 65534 in /workspace under ``timeout -s KILL N`` (the whole process
  group), followed by ``kill -9 -1`` from the same uid, which ends anything the
  command left behind (daemonised children included) except PID 1;
- has a host-side deadline of N + grace seconds that kills every sandbox process,
  or restarts the container when even that cannot run (e.g. the pids limit is hit);
- streams its output into an ``OutputCapture``: the full bytes go to a spool file
  (for the artifact store), memory holds only a bounded head and tail.

Before every execution the engine's account of the container must show the
workspace mounted read-only and nothing mounted writable (``writable_mounts``): the
check observes the tree and cannot change it, which is why no walk follows it.
Afterwards the host verifies from the container's cgroup that only PID 1 is left."""

from __future__ import annotations

import collections
import hashlib
import json
import logging
import os
import re
import socket
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Protocol

import docker
from docker.errors import APIError, DockerException, ImageNotFound, NotFound
from docker.types import Mount, Ulimit
from docker.utils.socket import frames_iter

from runs.core.policy import SandboxLimits
from sandbox.docker_client import new_client, shared_client
from sandbox.engine import ENGINE_ERRORS, SandboxUnavailable, unavailable

log = logging.getLogger(__name__)

SANDBOX_USER = "65534:65534"
WORKDIR = "/workspace"
LABEL_MANAGED = "harness.managed"
LABEL_RUN = "harness.run_id"
LABEL_SCOPE = "harness.scope"
LABEL_SPEC = "harness.spec"
DEFAULT_SCOPE = "default"
SCRATCH = "/tmp"
# Fixed by trusted code, never copied from the worker. The workspace is mounted
# read-only, so whatever a check writes (caches, build output) must go to the scratch
# tmpfs; these point the usual tools there. Bytecode needs nothing: Python skips
# writing it where it cannot (and a PYTHONPYCACHEPREFIX would hide the image's own
# compiled stdlib, making every check compile it again).
SANDBOX_ENV = {"HOME": SCRATCH, "TMPDIR": SCRATCH, "XDG_CACHE_HOME": f"{SCRATCH}/.cache"}
DEADLINE_GRACE_SECONDS = 2.0
STREAM_GRACE_SECONDS = 1.0
# PID 1: reaps every orphan. Signals from inside the container cannot kill it
# (the kernel protects a namespace's init), so ``kill -9 -1`` spares it.
REAPER = """
import os, time
while True:
    try:
        os.wait()
    except ChildProcessError:
        time.sleep(0.2)
"""
# The engine's own tmpfs for shared memory: writable too, bounded by the kernel at the
# engine's shm size (64 MB by default), and emptied with scratch.
SHM = "/dev/shm"
# Empties scratch, so no check sees what an earlier one left there.
SCRATCH_RESET = (
    f"find {SCRATCH} {SHM} -mindepth 1 -type d -exec chmod u+rwx {{}} + 2>/dev/null; find {SCRATCH} {SHM} -mindepth 1 -delete 2>/dev/null"
)
# $0 is the timeout; $1 where the check runs: "workspace" (read-only) or "copy", a
# throwaway copy of it in scratch for a check that must write into its tree; the
# rest, "$@" after the shift, is the check's argv (never a shell string).
WRAPPER = (
    f"{SCRATCH_RESET}; "
    f'if [ "$1" = copy ]; then cp -R {WORKDIR}/. {SCRATCH}/tree || exit 125; cd {SCRATCH}/tree || exit 125; fi; shift; '
    'timeout -s KILL "$0" "$@"; rc=$?; kill -9 -1 2>/dev/null; '
    f"{SCRATCH_RESET}; exit $rc"
)
KILL_ALL = ["sh", "-c", "kill -9 -1 2>/dev/null; exit 0"]
# A command killed by a signal that was none of ours: how long the engine may take to
# report that the container itself died (a removal or kill from outside).
SETTLE_SECONDS = 1.0


class RuntimeMissing(SandboxUnavailable):
    """The policy asks for a container runtime the engine does not have."""


# Under gVisor the host cgroup counts the sandbox's own threads, and the sandbox's
# kernel dies when it cannot make one. Measured with runsc's ptrace platform: about
# 40 host threads for the sandbox itself, and a fork bomb held at 128 processes by
# the sandbox's nproc limit peaked at 2,300-2,800 host threads (up to 22 each), so
# the host budget leaves room for the sandbox's own limit to act first.
RUNSC_BASE_PIDS = 64
RUNSC_PIDS_PER_TASK = 32
RUNSC_CONFIG = '{"runtimes": {"runsc": {"path": "/usr/bin/runsc", "runtimeArgs": ["--platform=ptrace", "--network=none"]}}}'


def check_runtime(client: docker.DockerClient, runtime: str) -> None:
    """Refuse, naming it, a runtime the engine has not registered (the engine's own
    error would come only at create time, and less clearly)."""
    registered = client.info().get("Runtimes") or {}
    if runtime not in registered:
        raise RuntimeMissing(
            f"the Docker engine has no runtime {runtime!r} (policy sandbox.runtime = {runtime}; "
            f"it has {', '.join(sorted(registered)) or 'none'}). Register it in /etc/docker/daemon.json"
            + (f" as {RUNSC_CONFIG}" if runtime == "runsc" else "")
            + " and restart the engine (scripts/start_docker.sh does this), or choose another runtime in the policy"
        )


@dataclass(frozen=True)
class ContainerSpec:
    image: str
    memory: str = "512m"
    cpus: float = 1.0
    pids_limit: int = 128
    network: str = "none"
    scratch_mb: int = 256
    runtime: str = "runc"

    @classmethod
    def from_limits(cls, limits: SandboxLimits, image: str) -> ContainerSpec:
        return cls(
            image=image,
            memory=limits.memory,
            cpus=limits.cpus,
            pids_limit=limits.pids_limit,
            network=limits.network,
            scratch_mb=limits.scratch_mb,
            runtime=limits.runtime,
        )

    @property
    def host_pids_limit(self) -> int:
        """The host cgroup's pids limit. Under gVisor that cgroup also counts the
        sandbox kernel's own threads (several per sandboxed process), and a sandbox
        that reaches it dies whole instead of refusing a fork; so there the policy's
        limit is enforced inside gVisor, as RLIMIT_NPROC (``ulimits``), and the host
        limit only bounds what gVisor may use for it."""
        if self.runtime == "runc":
            return self.pids_limit
        return RUNSC_BASE_PIDS + self.pids_limit * RUNSC_PIDS_PER_TASK

    @property
    def ulimits(self) -> list[Ulimit]:
        # Not under runc: there RLIMIT_NPROC counts every process of uid 65534 on the
        # host, every other sandbox's included.
        return [] if self.runtime == "runc" else [Ulimit(name="nproc", soft=self.pids_limit, hard=self.pids_limit)]

    @property
    def tmpfs(self) -> dict[str, str]:
        # The kernel bounds scratch: a check that fills it gets ENOSPC, nothing more.
        return {SCRATCH: f"rw,noexec,nosuid,nodev,size={self.scratch_mb}m"}

    @property
    def digest(self) -> str:
        return hashlib.sha256(json.dumps(asdict(self), sort_keys=True).encode()).hexdigest()[:16]


class OutputListener(Protocol):
    """Watches an execution's output as it arrives (runs.live_output): it must be
    quick and must not fail; the capture stays the record."""

    def write(self, data: bytes) -> None: ...

    def close(self) -> None: ...


class OutputCapture:
    """Streams an execution's output to a spool file, hashing it, and keeps only
    the head and tail in memory; a listener, if any, sees each chunk too."""

    def __init__(self, inline_limit: int, spool_dir: Path | None = None, listener: OutputListener | None = None) -> None:
        self.listener = listener
        self.inline_limit = max(256, inline_limit)
        self._half = self.inline_limit // 2
        self.head = bytearray()
        self._tail: collections.deque[bytes] = collections.deque()
        self._tail_len = 0
        self.total = 0
        self._sha = hashlib.sha256()
        if spool_dir is not None:
            spool_dir.mkdir(parents=True, exist_ok=True)
        fd, name = tempfile.mkstemp(prefix="harness-output-", dir=spool_dir)
        self.path = Path(name)
        self._file = os.fdopen(fd, "wb")

    def write(self, data: bytes) -> None:
        if self.listener is not None:
            self.listener.write(data)
        self.total += len(data)
        self._sha.update(data)
        self._file.write(data)
        room = self.inline_limit - len(self.head)
        if room > 0:
            self.head += data[:room]
            data = data[room:]
        if data:
            self._tail.append(data)
            self._tail_len += len(data)
            while self._tail and self._tail_len - len(self._tail[0]) >= self._half:
                self._tail_len -= len(self._tail.popleft())

    def close(self) -> None:
        if self.listener is not None:
            self.listener.close()
        if not self._file.closed:
            self._file.close()

    @property
    def sha256(self) -> str:
        return self._sha.hexdigest()

    @property
    def truncated(self) -> bool:
        return self.total > self.inline_limit

    def excerpt(self, ref: str | None) -> str:
        """The whole output when it fits, else its head and tail around a marker."""
        if not self.truncated:
            return bytes(self.head).decode("utf-8", errors="replace")
        last = (bytes(self.head) + b"".join(self._tail))[-self._half :]
        omitted = self.total - self._half - len(last)
        where = f"; full output: {ref}" if ref else ""
        return (
            bytes(self.head[: self._half]).decode("utf-8", errors="replace")
            + f"\n[... {omitted} bytes omitted{where} ...]\n"
            + last.decode("utf-8", errors="replace")
        )

    def discard(self) -> None:
        self.close()
        self.path.unlink(missing_ok=True)


@dataclass(frozen=True)
class ExecResult:
    exit_code: int | None
    timed_out: bool
    duration_ms: int
    oom_killed: bool | None  # None: not detectable on this host
    killed: bool  # by kill() (the kill switch)
    error: str | None = None  # the output stream broke off
    stopped_for: str | None = None  # why ``watch`` had the execution's processes killed
    # The container or the engine failed during the execution (not our kill, not our
    # limits): the exit status is not the command's own and proves nothing.
    lost: str | None = None


class _Watcher:
    """Asks ``watch`` every ``seconds`` on its own thread until stopped; the first
    reason it gives is kept and ``stop_execution`` is called once.

    ``stop`` does not wait for a ``watch`` call under way (a measurement can take a
    while, and a kill must not wait for it); the lock makes sure that once ``stop``
    has returned, the thread can no longer stop anything, not the next execution."""

    def __init__(self, watch: Callable[[], str | None] | None, seconds: float, stop_execution: Callable[[], None]) -> None:
        self.reason: str | None = None
        self._watch = watch
        self._seconds = seconds
        self._stop_execution = stop_execution
        self._done = threading.Event()
        self._lock = threading.Lock()
        if watch is not None:
            threading.Thread(target=self._run, name="exec-watch", daemon=True).start()

    def _run(self) -> None:
        assert self._watch is not None
        while not self._done.wait(self._seconds):
            try:
                reason = self._watch()
            except Exception:  # noqa: BLE001 - one failed look must not end the watch
                log.exception("sandbox: watching an execution failed")
                continue
            with self._lock:
                if self._done.is_set():
                    return
                if reason is not None:
                    self.reason = reason
                    log.warning("sandbox execution stopped: %s", reason)
                    self._stop_execution()
                    return

    def stop(self) -> None:
        with self._lock:
            self._done.set()


def _name(scope: str, run_id: str) -> str:
    return re.sub(r"[^a-zA-Z0-9_.-]", "-", f"harness-{scope}-{run_id}")[:200]


class SandboxContainer:
    def __init__(
        self,
        client: docker.DockerClient,
        container_id: str,
        run_id: str,
        spec: ContainerSpec,
        image_digest: str,
        scope: str = DEFAULT_SCOPE,
    ) -> None:
        self._client = client
        self.id = container_id
        self.run_id = run_id
        self.spec = spec
        self.image_digest = image_digest
        self.scope = scope
        self._killed = False
        # Set once the container failed under an execution: it is not used again.
        self.lost: str | None = None
        self._restarted_by_us = False
        self._cgroup_paths: dict[str, Path | None] = {}
        # The output stream of the execution in flight, so a kill can cut it locally.
        self._stream_lock = threading.Lock()
        self._stream: Any = None

    # -- lifecycle -------------------------------------------------------------

    @classmethod
    def start(
        cls,
        run_id: str,
        workspace_dir: Path,
        spec: ContainerSpec,
        *,
        scope: str = DEFAULT_SCOPE,
        client: docker.DockerClient | None = None,
    ) -> SandboxContainer:
        """The run's running container: reused when one with the same spec and
        workspace exists (a resumed run), else created. A reused container is found
        after its driver died or lost the run, so whatever that driver left running
        (a check it was waiting for) is killed first: nothing but this run's next
        execution may change the workspace. An engine that fails raises
        SandboxUnavailable."""
        try:
            return cls._start(run_id, workspace_dir, spec, scope, client or shared_client())
        except ENGINE_ERRORS as exc:
            raise unavailable(exc, "starting the sandbox container") from None

    @classmethod
    def _start(cls, run_id: str, workspace_dir: Path, spec: ContainerSpec, scope: str, client: docker.DockerClient) -> SandboxContainer:
        labels = {LABEL_MANAGED: "1", LABEL_RUN: run_id, LABEL_SCOPE: scope, LABEL_SPEC: spec.digest}
        filters = {"label": [f"{LABEL_MANAGED}=1", f"{LABEL_RUN}={run_id}", f"{LABEL_SCOPE}={scope}"]}
        source = str(workspace_dir.resolve())
        for existing in client.containers.list(all=True, filters=filters):
            mounts = [(m.get("Source"), m.get("RW")) for m in existing.attrs.get("Mounts", [])]
            if existing.status == "running" and existing.labels.get(LABEL_SPEC) == spec.digest and mounts == [(source, False)]:
                reused = cls(client, existing.id, run_id, spec, existing.attrs["Image"], scope)
                reused.kill_processes()
                return reused
            remove_container(client, existing.id)
        check_runtime(client, spec.runtime)
        try:
            container = client.containers.create(
                spec.image,
                command=["python3", "-c", REAPER],
                name=_name(scope, run_id),
                labels=labels,
                user=SANDBOX_USER,
                working_dir=WORKDIR,
                environment=dict(SANDBOX_ENV),
                network_mode=spec.network,
                read_only=True,
                cap_drop=["ALL"],
                security_opt=["no-new-privileges"],
                mem_limit=spec.memory,
                memswap_limit=spec.memory,
                nano_cpus=int(spec.cpus * 1_000_000_000),
                pids_limit=spec.host_pids_limit,
                ulimits=spec.ulimits,
                tmpfs=spec.tmpfs,
                # Read-only: only the harness's own file tools write the workspace, so a
                # check observes it and never changes it.
                mounts=[Mount(target=WORKDIR, source=source, type="bind", read_only=True)],
                runtime=spec.runtime,
                hostname="sandbox",
                stop_signal="SIGKILL",
                detach=True,
            )
        except ImageNotFound:
            raise SandboxUnavailable(f"sandbox image {spec.image} not found; build it with: bash sandbox/image/build.sh") from None
        except APIError as exc:
            if exc.status_code == 409:  # a stale container holds the name
                remove_container(client, _name(scope, run_id))
                return cls._start(run_id, workspace_dir, spec, scope, client)
            raise
        try:
            container.start()
        except ENGINE_ERRORS:
            remove_container(client, container.id)
            raise
        return cls(client, container.id, run_id, spec, container.attrs["Image"], scope)

    def remove(self) -> None:
        remove_container(self._client, self.id)

    def kill(self) -> None:
        """From any thread: end the execution in flight and remove the container.

        The stream is cut here first, so the driving thread returns at once even when
        the engine is slow to remove the container (or fails to: the sweeper removes
        it later); the kill switch must not wait on the engine."""
        self._killed = True
        self._cut_stream()
        remove_container(new_client(timeout=10), self.id)

    @property
    def killed(self) -> bool:
        return self._killed

    def _revive(self) -> None:
        """Start the container again if it stopped (nothing in it survives)."""
        try:
            self._client.api.start(self.id)
        except ENGINE_ERRORS as exc:
            raise self._lose(unavailable(exc, "restarting the stopped sandbox container")) from None

    # -- executions -------------------------------------------------------------

    def exec(
        self,
        argv: list[str],
        *,
        timeout_seconds: int,
        capture: OutputCapture,
        watch: Callable[[], str | None] | None = None,
        watch_seconds: float = 0.5,
        on_copy: bool = False,
    ) -> ExecResult:
        """Run ``argv`` in the container, in the read-only workspace or (``on_copy``)
        in a throwaway copy of it. ``watch``, if given, is asked every
        ``watch_seconds`` while it runs; a reason it returns kills the execution.

        Raises SandboxUnavailable when the command could not start; a container or
        engine that fails while it runs is reported as ``lost``."""
        if self._killed:
            raise SandboxUnavailable("the sandbox was killed")
        if self.lost is not None:
            raise SandboxUnavailable(self.lost)
        api = self._client.api
        command = ["sh", "-c", WRAPPER, str(timeout_seconds), "copy" if on_copy else "workspace", *argv]
        exec_id = self._create_exec(command)
        before = self._read_only_state()
        self._restarted_by_us = False
        oom_before = self._oom_kills()
        hit = threading.Event()
        deadline = threading.Timer(timeout_seconds + DEADLINE_GRACE_SECONDS, self._deadline, args=(hit,))
        deadline.daemon = True
        started = time.monotonic()
        try:
            sock = api.exec_start(exec_id, socket=True)
        except ENGINE_ERRORS as exc:
            raise self._lose(unavailable(exc, "starting the check")) from None
        error = None
        deadline.start()
        watcher = _Watcher(watch, watch_seconds, self._kill_processes_from_another_thread)
        raw = getattr(sock, "_sock", sock)
        with self._stream_lock:
            # A kill that came after the check at the top has already asked the engine
            # to remove the container; this stream must not outlive it.
            already_killed = self._killed
            self._stream = None if already_killed else raw
        try:
            if hasattr(raw, "settimeout"):
                raw.settimeout(None)  # the deadline above bounds the wait, not the socket
            if not already_killed:
                for _stream, data in frames_iter(sock, False):
                    capture.write(data)
        except (OSError, DockerException) as exc:
            if not self._killed:
                error = f"the output stream broke off: {exc}"
        finally:
            with self._stream_lock:
                self._stream = None
            watcher.stop()
            deadline.cancel()
            deadline.join()  # a deadline kill already under way must not hit the next execution
            capture.close()
            sock.close()
        elapsed = time.monotonic() - started
        # A killed execution's exit code says nothing, and asking a slow engine for it
        # would hold the kill up.
        exit_code = None if self._killed else self._exit_code(exec_id)
        oom_after = self._oom_kills()
        oom = None if oom_before is None or oom_after is None else oom_after > oom_before
        timed_out = hit.is_set() or (elapsed >= timeout_seconds and exit_code in (124, 137))
        # Our own ends (the kill switch, the timeout, the watch, the memory limit) are
        # the command's result; anything else that ended it is asked of the engine.
        ours = self._killed or timed_out or watcher.reason is not None or bool(oom)
        lost = None if ours else self._lost_during(before, exit_code)
        if not self._killed and lost is None:
            self._reap()
        return ExecResult(
            exit_code=None if timed_out else exit_code,
            timed_out=timed_out,
            duration_ms=int(elapsed * 1000),
            oom_killed=oom,
            killed=self._killed,
            error=error,
            stopped_for=watcher.reason,
            lost=lost,
        )

    def _lose(self, problem: SandboxUnavailable) -> SandboxUnavailable:
        """The container failed the attempt: it is not used again (the next attempt
        starts a fresh one)."""
        self.lost = problem.reason
        return problem

    def _state(self, when: str) -> dict[str, Any]:
        state: dict[str, Any] = self._inspect(when)["State"]
        return state

    def _inspect(self, when: str) -> dict[str, Any]:
        try:
            attrs: dict[str, Any] = self._client.api.inspect_container(self.id)
        except ENGINE_ERRORS as exc:
            raise self._lose(unavailable(exc, when)) from None
        return attrs

    def _read_only_state(self) -> dict[str, Any]:
        """The container's state before a check, once the engine has shown that the
        check cannot write the workspace: that proof is what lets the harness skip a
        walk of the tree after every check (``sandbox/revision.py``). A container
        that fails it runs nothing and is not used again."""
        attrs = self._inspect("before the check")
        problem = writable_mounts(attrs)
        if problem is not None:
            raise self._lose(SandboxUnavailable(problem))
        state: dict[str, Any] = attrs["State"]
        return state

    def _lost_during(self, before: dict[str, Any], exit_code: int | None) -> str | None:
        """Why the container itself failed under the execution, by the engine's own
        account (gone, stopped or restarted by someone else, or the engine gone), or
        None when the exit status is the command's own."""
        settle = time.monotonic() + SETTLE_SECONDS
        while True:
            try:
                after = self._state("after the check")
            except SandboxUnavailable as exc:
                return exc.reason
            reason = _changed_from_outside(before, after, self._restarted_by_us)
            if reason is not None:
                self.lost = reason
                return reason
            # A command ended by a signal may have died with its container, and the
            # engine may not have noticed yet; so may one whose runtime lost it (runsc
            # answers 128 when the sandbox's kernel died under the execution).
            if (exit_code is not None and exit_code < 128) or time.monotonic() >= settle:
                return None
            time.sleep(0.05)

    def _create_exec(self, command: list[str]) -> str:
        for attempt in (1, 2):
            try:
                created: dict[str, Any] = self._client.api.exec_create(
                    self.id, command, user=SANDBOX_USER, workdir=WORKDIR, stdout=True, stderr=True, stdin=False, tty=False
                )
                return str(created["Id"])
            except ENGINE_ERRORS as exc:
                # 409: the container stopped since the last execution; nothing runs in
                # it, so it is started again once.
                stopped = isinstance(exc, APIError) and exc.status_code == 409
                if attempt == 2 or self._killed or not stopped:
                    raise self._lose(unavailable(exc, "creating the check's execution")) from None
                self._revive()
        raise AssertionError("unreachable")

    def _exit_code(self, exec_id: str) -> int | None:
        wait_until = time.monotonic() + 2
        while True:
            try:
                info = self._client.api.exec_inspect(exec_id)
            except ENGINE_ERRORS:
                return None
            if not info.get("Running") or time.monotonic() > wait_until:
                code = info.get("ExitCode")
                return code if isinstance(code, int) else None
            time.sleep(0.01)

    def _deadline(self, hit: threading.Event) -> None:
        hit.set()
        log.warning("sandbox %s: execution passed its deadline; killing its processes", self.id[:12])
        self._kill_processes_from_another_thread()
        # A stream normally ends with its processes; one whose sandbox died under it
        # (gVisor's, when a fork bomb takes its kernel down) may never end on its own.
        time.sleep(STREAM_GRACE_SECONDS)
        self._cut_stream()

    def _cut_stream(self) -> None:
        with self._stream_lock:
            # Under the lock: the driving thread closes the socket only after it has
            # cleared _stream under the same lock, so this never hits a reused fd.
            if self._stream is not None:
                try:
                    self._stream.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass  # already shut: the execution ended on its own

    def _kill_processes_from_another_thread(self) -> None:
        # Its own client: the driving thread's is busy streaming the execution.
        self.kill_processes(new_client(timeout=10))

    def kill_processes(self, client: docker.DockerClient | None = None) -> None:
        """Kill every sandbox process but PID 1; restart the container when even an
        execution of ``kill`` cannot start (e.g. the pids limit is exhausted)."""
        if self._killed:
            return
        api = (client or self._client).api
        try:
            exec_id = api.exec_create(self.id, KILL_ALL, user=SANDBOX_USER)["Id"]
            api.exec_start(exec_id)
            if api.exec_inspect(exec_id).get("ExitCode") == 0:
                return
        except NotFound:
            return
        except ENGINE_ERRORS as exc:
            log.warning("sandbox %s: kill -9 -1 failed (%s); restarting the container", self.id[:12], exc)
        self._restarted_by_us = True
        try:
            api.kill(self.id)
        except ENGINE_ERRORS:
            pass
        try:
            api.start(self.id)
        except ENGINE_ERRORS as exc:
            log.warning("sandbox %s: could not start the container again (%s)", self.id[:12], exc)

    def _reap(self) -> None:
        """Ensure nothing but PID 1 outlives an execution (a process that dodged the
        wrapper's kill could go on changing the workspace)."""
        count = self._pids_current()
        if count is not None:
            settle = time.monotonic() + 0.25
            while count is not None and count > 1 and time.monotonic() < settle:
                time.sleep(0.005)
                count = self._pids_current()
            if count is not None and count <= 1:
                return
        self.kill_processes()

    # -- cgroup readings from the host (the worker runs beside the engine) ---------

    def _cgroup_file(self, controller: str, name: str) -> Path | None:
        key = f"{controller}/{name}"
        if key not in self._cgroup_paths:
            candidates = [
                Path(f"/sys/fs/cgroup/{controller}/docker/{self.id}/{name}"),
                Path(f"/sys/fs/cgroup/{controller}/system.slice/docker-{self.id}.scope/{name}"),
                Path(f"/sys/fs/cgroup/system.slice/docker-{self.id}.scope/{name}"),
                Path(f"/sys/fs/cgroup/docker/{self.id}/{name}"),
            ]
            self._cgroup_paths[key] = next((p for p in candidates if p.exists()), None)
        return self._cgroup_paths[key]

    def _read_cgroup(self, controller: str, names: tuple[str, ...]) -> str | None:
        for name in names:
            path = self._cgroup_file(controller, name)
            if path is not None:
                try:
                    return path.read_text()
                except OSError:
                    return None
        return None

    def _pids_current(self) -> int | None:
        if self.spec.runtime != "runc":
            return None  # the host cgroup counts gVisor's threads, not the sandbox's processes
        text = self._read_cgroup("pids", ("pids.current",))
        return int(text) if text is not None and text.strip().isdigit() else None

    def _oom_kills(self) -> int | None:
        text = self._read_cgroup("memory", ("memory.oom_control", "memory.events"))
        if text is None:
            return None
        for line in text.splitlines():
            key, _, value = line.partition(" ")
            if key == "oom_kill" and value.strip().isdigit():
                return int(value)
        return None


def sweep_orphans(
    active_run_ids: set[str] | list[str], *, scope: str = DEFAULT_SCOPE, client: docker.DockerClient | None = None
) -> list[str]:
    """Remove this scope's managed containers whose run is not active (a worker
    died before removing them); return the run ids (or container ids) removed."""
    client = client or shared_client()
    active = {str(r) for r in active_run_ids}
    removed = []
    filters = {"label": [f"{LABEL_MANAGED}=1", f"{LABEL_SCOPE}={scope}"]}
    for container in client.containers.list(all=True, filters=filters):
        run_id = container.labels.get(LABEL_RUN)
        if run_id in active:
            continue
        if remove_container(client, container.id):
            removed.append(run_id or container.id)
    return removed


def remove_container(client: docker.DockerClient, container_id: str) -> bool:
    """Force-remove a container, tolerating what the engine is already doing with
    it: a removal in progress (409) or a container already gone (404, False)."""
    try:
        client.api.remove_container(container_id, force=True)
    except NotFound:
        return False
    except APIError as exc:
        if exc.status_code != 409:
            raise
    return True


def writable_mounts(attrs: dict[str, Any]) -> str | None:
    """Why, by the engine's account of a container, a process in it could write the
    workspace, or None: the workspace must be mounted, and nothing may be mounted
    writable (tmpfs scratch is not a mount of the host's). Mounts cannot change while
    a container exists, so this holds for the whole execution."""
    mounts = attrs.get("Mounts") or []
    writable = [m.get("Destination") for m in mounts if m.get("RW") is not False]
    if writable:
        return f"the sandbox container mounts {', '.join(map(str, writable))} writable; checks must see the workspace read-only"
    if not any(m.get("Destination") == WORKDIR for m in mounts):
        return f"the sandbox container does not mount the workspace at {WORKDIR}"
    return None


def _changed_from_outside(before: dict[str, Any], after: dict[str, Any], restarted_by_us: bool) -> str | None:
    """Compare docker's account of the container before and after an execution."""
    if not after.get("Running"):
        if after.get("OOMKilled") and not before.get("OOMKilled"):
            return None  # our memory limit ended it: the check's own result
        status, code = after.get("Status"), after.get("ExitCode")
        return f"the sandbox container was stopped during the check, not by the harness (status {status}, exit code {code})"
    if after.get("StartedAt") != before.get("StartedAt") and not restarted_by_us:
        return "the sandbox container was restarted during the check, not by the harness"
    return None
