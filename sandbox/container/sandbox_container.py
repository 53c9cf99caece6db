"""One Docker container per run, and executions inside it: started or reused, killed,
and each execution driven from start to result.

The container is created with the sandbox defaults (docs/design.md, Trust boundaries) and the
run's policy limits (``sandbox.container.spec``); its PID 1 is a tiny reaper so orphaned processes (a fork bomb's
debris) are collected and do not pin the pids limit. Every execution:

- runs as uid 65534 in /workspace under ``timeout -s KILL N`` (the whole process
  group), followed by ``kill -9 -1`` from the same uid, which ends anything the
  command left behind (daemonised children included) except PID 1;
- has a host-side deadline of N + grace seconds that kills every sandbox process,
  or restarts the container when even that cannot run (e.g. the pids limit is hit);
- streams its output into an ``OutputCapture`` (``sandbox.container.output``): the full
  bytes go to a spool file (for the artifact store), memory holds only a bounded head
  and tail.

The wrapper, the result and the watch are ``sandbox.container.exec_watch``; the cgroup readings
``sandbox.container.cgroups``; the sweep of containers left behind ``sandbox.container.orphans``.

Before its first execution the engine's account of the container must show the
workspace mounted read-only and nothing mounted writable (``writable_mounts``): the
check observes the tree and cannot change it, which is why no walk follows it. A
container's mounts are fixed when it is created, so the proof holds for every later
execution in it; it is asked for again after the harness restarted the container.
Afterwards the host verifies from the container's cgroup that only PID 1 is left.

An execution that ends normally costs two requests to the engine, the floor: create
the execution, and start it with its output streamed. Its exit status comes with the
output, from the wrapper (``exec_watch.WrapperOutput``); the engine is asked about the
execution and the container only when the stream ends without it, or when the status
says the command was killed by a signal (which the container's death also does)."""

from __future__ import annotations

import contextlib
import logging
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import docker
from docker.errors import APIError, ImageNotFound, NotFound

from sandbox.container.cgroups import ContainerCgroup
from sandbox.container.client import new_client, shared_client
from sandbox.container.engine import ENGINE_ERRORS, SandboxUnavailable, unavailable
from sandbox.container.exec_watch import (
    DEADLINE_GRACE_SECONDS,
    KILL_ALL,
    KILLED,
    SETTLE_SECONDS,
    STREAM_GRACE_SECONDS,
    ExecResult,
    ExecWatcher,
    WrapperOutput,
    changed_from_outside,
    execution_exit_code,
    wrapped,
)
from sandbox.container.output import OutputCapture
from sandbox.container.pool import current as current_pool
from sandbox.container.spec import (
    DEFAULT_SCOPE,
    LABEL_MANAGED,
    LABEL_ROLE,
    LABEL_RUN,
    LABEL_SCOPE,
    LABEL_SPEC,
    ROLE_MAIN,
    SANDBOX_USER,
    WORKDIR,
    ContainerSpec,
    check_runtime,
    container_name,
    create_container,
    remove_container,
    writable_mounts,
)
from sandbox.exec_stream import frames

log = logging.getLogger(__name__)


class SandboxContainer:
    def __init__(
        self,
        client: docker.DockerClient,
        container_id: str,
        run_id: str,
        spec: ContainerSpec,
        image_digest: str,
        scope: str = DEFAULT_SCOPE,
        role: str = ROLE_MAIN,
        proved_state: dict[str, Any] | None = None,
        first_exec_ended: Callable[[], None] | None = None,
    ) -> None:
        self._client = client
        self.id = container_id
        self.run_id = run_id
        self.role = role
        self.spec = spec
        self.image_digest = image_digest
        self.scope = scope
        self._killed = False
        # Set once the container failed under an execution: it is not used again.
        self.lost: str | None = None
        self._restarted_by_us = False
        # The engine's account of the container once it proved the workspace read-only
        # (``_read_only_state``; for a pooled container, when the pool started it);
        # None until then, and again after a restart of ours.
        self._proved_state: dict[str, Any] | None = proved_state
        # Called once, when the first execution here ends (the pool's refill waits for it).
        self._first_exec_ended = first_exec_ended
        self._cgroup = ContainerCgroup(container_id, spec.runtime)
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
        role: str = ROLE_MAIN,
        scope: str = DEFAULT_SCOPE,
        client: docker.DockerClient | None = None,
        pooled: bool = True,
    ) -> SandboxContainer:
        """The run's running container in ``role``: one of the process's pool
        (``pooled``; see ``from_pool``), else reused when one with the same spec and
        workspace exists (a resumed run), else created. A reused container is found
        after its driver died or lost the run, so whatever that driver left running
        (a check it was waiting for) is killed first: nothing but this run's next
        execution may change the workspace. An engine that fails raises
        SandboxUnavailable."""
        try:
            # Inside the try: making the client asks the engine its version, which an
            # engine that is down refuses like any other request.
            client = client or shared_client()
            if pooled and (taken := cls.from_pool(run_id, workspace_dir, spec, role=role, scope=scope, client=client)) is not None:
                return taken
            return cls._start(run_id, role, workspace_dir, spec, scope, client)
        except ENGINE_ERRORS as exc:
            raise unavailable(exc, "starting the sandbox container") from None

    @classmethod
    def from_pool(
        cls,
        run_id: str,
        workspace_dir: Path,
        spec: ContainerSpec,
        *,
        role: str = ROLE_MAIN,
        scope: str = DEFAULT_SCOPE,
        client: docker.DockerClient | None = None,
    ) -> SandboxContainer | None:
        """A container of the process's pool (``sandbox.container.pool``) made the run's,
        or None. Taking one moves the workspace's entries into the container's mounted
        directory, so it must not overlap anything that reads or writes the workspace."""
        pool = current_pool()
        if pool is None:
            return None
        try:
            client = client or shared_client()
        except ENGINE_ERRORS:
            return None  # the start without the pool meets the engine's failure and says so
        taken = pool.take(run_id, role, workspace_dir, spec, scope, client)
        if taken is None:
            return None
        return cls(
            client,
            taken.container_id,
            run_id,
            spec,
            taken.image_digest,
            scope,
            role,
            proved_state=taken.state,
            first_exec_ended=taken.first_exec_ended,
        )

    @classmethod
    def _start(
        cls, run_id: str, role: str, workspace_dir: Path, spec: ContainerSpec, scope: str, client: docker.DockerClient
    ) -> SandboxContainer:
        labels = [f"{LABEL_MANAGED}=1", f"{LABEL_RUN}={run_id}", f"{LABEL_ROLE}={role}", f"{LABEL_SCOPE}={scope}"]
        source = str(workspace_dir.resolve())
        for existing in client.containers.list(all=True, filters={"label": labels}):
            mounts = [(m.get("Source"), m.get("RW")) for m in existing.attrs.get("Mounts", [])]
            if existing.status == "running" and existing.labels.get(LABEL_SPEC) == spec.digest and mounts == [(source, False)]:
                reused = cls(client, existing.id, run_id, spec, existing.attrs["Image"], scope, role)
                reused.kill_processes()
                return reused
            remove_container(client, existing.id)
        check_runtime(client, spec.runtime)
        try:
            container = create_container(client, run_id, role, source, spec, scope)
        except ImageNotFound:
            raise SandboxUnavailable(f"sandbox image {spec.image} not found; build it with: bash sandbox/image/build.sh") from None
        except APIError as exc:
            if exc.status_code == 409:  # a stale container holds the name
                remove_container(client, container_name(scope, run_id, role))
                return cls._start(run_id, role, workspace_dir, spec, scope, client)
            raise
        try:
            container.start()
        except ENGINE_ERRORS:
            remove_container(client, container.id)
            raise
        return cls(client, container.id, run_id, spec, container.attrs["Image"], scope, role)

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
        self._proved_state = None
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
        environment: dict[str, str] | None = None,
    ) -> ExecResult:
        """Run ``argv`` in the container, in the read-only workspace or (``on_copy``)
        in a throwaway copy of it, with ``environment`` added to the sandbox's own
        (the egress proxy's address, for a check that has one). ``watch``, if given, is asked every
        ``watch_seconds`` while it runs; a reason it returns kills the execution.

        Raises SandboxUnavailable when the command could not start; a container or
        engine that fails while it runs is reported as ``lost``."""
        try:
            return self._exec(argv, timeout_seconds, capture, watch, watch_seconds, on_copy, environment)
        finally:
            ended, self._first_exec_ended = self._first_exec_ended, None
            if ended is not None:
                ended()

    def _exec(
        self,
        argv: list[str],
        timeout_seconds: int,
        capture: OutputCapture,
        watch: Callable[[], str | None] | None,
        watch_seconds: float,
        on_copy: bool,
        environment: dict[str, str] | None,
    ) -> ExecResult:
        if self._killed:
            raise SandboxUnavailable("the sandbox was killed")
        if self.lost is not None:
            raise SandboxUnavailable(self.lost)
        command = wrapped(argv, timeout_seconds, on_copy=on_copy)
        exec_id = self._create_exec(command, environment)
        before = self._read_only_state()
        self._restarted_by_us = False
        oom_before = self._cgroup.oom_kills()
        hit = threading.Event()
        deadline = threading.Timer(timeout_seconds + DEADLINE_GRACE_SECONDS, self._deadline, args=(hit,))
        deadline.daemon = True
        started = time.monotonic()
        try:
            sock = self._client.api.exec_start(exec_id, socket=True)
        except ENGINE_ERRORS as exc:
            raise self._lose(unavailable(exc, "starting the check")) from None
        deadline.start()
        watcher = ExecWatcher(watch, watch_seconds, self._kill_processes_from_another_thread)
        output = WrapperOutput(capture)
        try:
            error = self._stream_output(sock, output)
        finally:
            watcher.stop()
            deadline.cancel()
            deadline.join()  # a deadline kill already under way must not hit the next execution
            reported = output.end()
            capture.close()
            sock.close()
        elapsed = time.monotonic() - started
        return self._result(exec_id, before, oom_before, elapsed, timeout_seconds, hit.is_set(), watcher.reason, error, reported)

    def _stream_output(self, sock: Any, output: WrapperOutput) -> str | None:
        """Copy the execution's output into ``output`` until it ends or a kill cuts
        it; why the stream broke off, if it did of its own accord."""
        raw = getattr(sock, "_sock", sock)
        with self._stream_lock:
            # A kill that came after the check at the top of exec has already asked the
            # engine to remove the container; this stream must not outlive it.
            already_killed = self._killed
            self._stream = None if already_killed else raw
        try:
            if hasattr(raw, "settimeout"):
                raw.settimeout(None)  # the deadline bounds the wait, not the socket
            if not already_killed:
                for stream, data in frames(sock):
                    output.write(stream, data)
        except OSError as exc:
            if not self._killed:
                return f"the output stream broke off: {exc}"
        finally:
            with self._stream_lock:
                self._stream = None
        return None

    def _result(
        self,
        exec_id: str,
        before: dict[str, Any],
        oom_before: int | None,
        elapsed: float,
        timeout_seconds: int,
        deadline_hit: bool,
        stopped_for: str | None,
        error: str | None,
        reported: int | None = None,
    ) -> ExecResult:
        """How the execution ended: by the command itself, by one of our own ends, or
        by the container failing under it. ``reported``: the exit status the wrapper
        gave at the end of the stream, if it did."""
        # A killed execution's exit code says nothing, and asking a slow engine for it
        # would hold the kill up.
        if self._killed:
            exit_code = None
        elif reported is not None and error is None:
            exit_code = reported
        else:
            exit_code = execution_exit_code(self._client, exec_id)
        oom_after = self._cgroup.oom_kills()
        oom = None if oom_before is None or oom_after is None else oom_after > oom_before
        timed_out = deadline_hit or (elapsed >= timeout_seconds and exit_code in (124, 137))
        # Our own ends (the kill switch, the timeout, the watch, the memory limit) are
        # the command's result; anything else that ended it is asked of the engine.
        ours = self._killed or timed_out or stopped_for is not None or bool(oom)
        # The wrapper ran to its end and the command was not killed by a signal: the
        # container was up until the last byte, so there is nothing to ask the engine.
        finished = exit_code is not None and exit_code == reported and exit_code < 128
        lost = None if ours or finished else self._lost_during(before, exit_code)
        if not self._killed and lost is None:
            self._reap()
        return ExecResult(
            exit_code=None if timed_out else exit_code,
            timed_out=timed_out,
            duration_ms=int(elapsed * 1000),
            oom_killed=oom,
            killed=self._killed,
            error=error,
            stopped_for=stopped_for,
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
        walk of the tree after every check (``sandbox/workspace/revision.py``). A container
        that fails it runs nothing and is not used again. Asked once per container (its
        mounts cannot change) and again after each restart of ours."""
        if self._proved_state is not None:
            return self._proved_state
        attrs = self._inspect("before the check")
        problem = writable_mounts(attrs)
        if problem is not None:
            raise self._lose(SandboxUnavailable(problem))
        state: dict[str, Any] = attrs["State"]
        self._proved_state = state
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
            reason = changed_from_outside(before, after, self._restarted_by_us)
            if reason is not None:
                self.lost = reason
                return reason
            # A command ended by a signal may have died with its container, and the
            # engine may not have noticed yet; so may one whose runtime lost it (runsc
            # answers 128 when the sandbox's kernel died under the execution).
            if (exit_code is not None and exit_code < 128) or time.monotonic() >= settle:
                return None
            time.sleep(0.05)

    def attach(self, argv: list[str]) -> Any:
        """Start ``argv`` as the sandbox user with its standard input open, and give
        the socket that carries its input and (multiplexed) output: the egress relay's
        only channel (``sandbox.egress.proxy``). The check's wrapper ends it with the check."""
        exec_id = self._create_exec(argv, stdin=True)
        try:
            return self._client.api.exec_start(exec_id, socket=True)
        except ENGINE_ERRORS as exc:
            raise self._lose(unavailable(exc, "starting the egress relay")) from None

    def _create_exec(self, command: list[str], environment: dict[str, str] | None = None, *, stdin: bool = False) -> str:
        for attempt in (1, 2):
            try:
                created: dict[str, Any] = self._client.api.exec_create(
                    self.id,
                    command,
                    user=SANDBOX_USER,
                    workdir=WORKDIR,
                    stdout=True,
                    stderr=True,
                    stdin=stdin,
                    tty=False,
                    environment=environment,
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
                # already shut: the execution ended on its own
                with contextlib.suppress(OSError):
                    self._stream.shutdown(socket.SHUT_RDWR)

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
            if api.exec_start(exec_id) == KILLED:
                return
        except NotFound:
            return
        except ENGINE_ERRORS as exc:
            log.warning("sandbox %s: kill -9 -1 failed (%s); restarting the container", self.id[:12], exc)
        self._restarted_by_us = True
        self._proved_state = None
        with contextlib.suppress(*ENGINE_ERRORS):
            api.kill(self.id)
        try:
            api.start(self.id)
        except ENGINE_ERRORS as exc:
            log.warning("sandbox %s: could not start the container again (%s)", self.id[:12], exc)

    def _reap(self) -> None:
        """Ensure nothing but PID 1 outlives an execution (a process that dodged the
        wrapper's kill could go on changing the workspace)."""
        count = self._cgroup.pids_current()
        if count is not None:
            settle = time.monotonic() + 0.25
            while count is not None and count > 1 and time.monotonic() < settle:
                time.sleep(0.005)
                count = self._cgroup.pids_current()
            if count is not None and count <= 1:
                return
        self.kill_processes()
