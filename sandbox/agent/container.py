"""One container per run for an outside agent (issue 41; docs/design.md, Trust
boundaries): the agent image (sandbox/agent/image/build.sh), the hardening of every
sandbox container (``sandbox.container.spec.hardening``: no network, no capability,
the project's seccomp profile, a read-only root, the policy's limits, the gVisor
runtime when the spec names it), the run's workspace read-only at /workspace, no
Docker socket, no credential in its environment but what the caller puts in the
agent's own (the run-scoped token), and labelled with the installation's scope and
the run like a run's check container, so the orphan sweep removes what is left.

The one way out is the run's gateway (the MCP endpoint and the model proxy, served by
Harness's web app under ``/agent/runs/<run id>/``): the egress relay runs beside the
agent, as the sandbox user (uid 65534, not the agent's), listening on the container's
loopback at ``GATEWAY_PORT``; each connection there goes over the relay's standard
input and output to the worker's ``EgressProxy``, which sends it to the gateway's
host and port alone, one request a connection, and only a request whose path is
under the run's prefix (``Forward``). So the CLIs get base URLs on
``http://127.0.0.1:GATEWAY_PORT`` and need no proxy support (Node's fetch has none).
Anything else is refused: a name lookup (the relay answers REFUSED and the proxy
records it), a request outside the run's paths (403 from the proxy, recorded), a
request through the relay's proxy port (nothing is on its list, recorded); a
connection to a raw address goes nowhere (the container has no interface but
loopback) and so leaves no event. Every connection, let through or refused, is an
``EgressConnection`` event with ``check_id`` ``agent`` through the caller's
``record``.

The agent runs as uid 1000 (``agent``), HOME a small tmpfs of its own
(``HOME_DIR``), its files written there before it starts; its standard output and
error go to the caller's ``on_output`` as they arrive; ``kill`` ends it (and the
container) at once, from any thread; a deadline ends its processes."""

from __future__ import annotations

import contextlib
import io
import logging
import socket
import tarfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any
from urllib.parse import urlsplit

import docker
from docker.errors import APIError, ImageNotFound

from core import events as ev
from core.policy import CheckDef
from sandbox.container.client import new_client, shared_client
from sandbox.container.engine import ENGINE_ERRORS, SandboxUnavailable, unavailable
from sandbox.container.exec_watch import KILL_ALL, execution_exit_code
from sandbox.container.spec import (
    DEFAULT_SCOPE,
    LABEL_MANAGED,
    LABEL_ROLE,
    LABEL_RUN,
    LABEL_SCOPE,
    REAPER,
    SANDBOX_USER,
    SCRATCH,
    WORKDIR,
    ContainerSpec,
    check_runtime,
    container_name,
    hardening,
    labels,
    remove_container,
)
from sandbox.egress.proxy import MAX_EVENTS, EgressProxy, EgressRefused, Forward
from sandbox.exec_stream import frames

log = logging.getLogger(__name__)

AGENT_IMAGE = "harness-agent:latest"
ROLE_AGENT = "agent"
# The image's user `agent` (sandbox/agent/image/build.sh): not the relay's uid, so the
# agent can neither signal the relay nor read its streams under /proc.
AGENT_UID = 1000
AGENT_USER = f"{AGENT_UID}:{AGENT_UID}"
HOME_DIR = "/home/agent"
HOME_MB = 64
# Where the relay listens for the gateway, on the container's own loopback.
GATEWAY_PORT = 8787
LOCAL_GATEWAY = f"http://127.0.0.1:{GATEWAY_PORT}"
# The agent's events: an EgressConnection names the check it belongs to, here the agent.
AGENT_EGRESS = CheckDef(check_id="agent", command=["agent"])
# An agent needs more than a check: Node and a CLI's bundle (the policy may say more).
AGENT_SPEC = ContainerSpec(image=AGENT_IMAGE, memory="1g", cpus=1.0, pids_limit=256, scratch_mb=256)
# How long the agent's processes have to go after a deadline before the stream is cut.
STREAM_GRACE_SECONDS = 2.0
FILES_SECONDS = 30.0

Record = Callable[[type[ev.Event], dict[str, Any]], None]
# ("stdout" or "stderr", bytes) as they arrive: quick, and must not fail.
OnOutput = Callable[[str, bytes], None]


@dataclass(frozen=True)
class Gateway:
    """The run's gateway as the worker reaches it (``http://host:port``, plain HTTP:
    the relay carries the agent's bytes as they are) and the paths that are the
    run's (``/agent/runs/<run id>/``)."""

    host: str
    port: int
    prefix: str

    @classmethod
    def for_run(cls, base_url: str, run_id: str) -> Gateway:
        parts = urlsplit(base_url)
        if parts.scheme != "http" or not parts.hostname or parts.path.strip("/") or parts.query:
            raise ValueError(f"the agent gateway must be http://host[:port], not {base_url!r}")
        return cls(parts.hostname, parts.port or 80, f"/agent/runs/{run_id}/")

    @property
    def local_url(self) -> str:
        """The run's gateway as the agent reaches it, inside its container:
        ``http://127.0.0.1:8787/agent/runs/<run id>`` (the presets append ``/mcp/``,
        ``/anthropic``, ``/openai``, ``/gemini``)."""
        return LOCAL_GATEWAY + self.prefix.rstrip("/")


@dataclass(frozen=True)
class AgentResult:
    # None when the agent did not end by itself (killed, or stopped at its deadline).
    exit_code: int | None
    timed_out: bool
    killed: bool
    duration_ms: int


class AgentContainer:
    """A run's agent container, started with its relay (``start``); ``run`` runs one
    command in it as the agent and waits for it; ``close`` removes it and gives what
    the agent's network did, per destination."""

    def __init__(self, client: docker.DockerClient, container_id: str, run_id: str, gateway: Gateway, proxy: EgressProxy) -> None:
        self._client = client
        self.id = container_id
        self.run_id = run_id
        self.gateway = gateway
        self._proxy = proxy
        self._killed = False
        self._closed = False
        self._summaries: list[ev.EgressSummary] = []
        self._stream_lock = threading.Lock()
        self._stream: Any = None

    # -- lifecycle -------------------------------------------------------------

    @classmethod
    def start(
        cls,
        run_id: str,
        workspace_dir: Path,
        gateway: Gateway,
        record: Record,
        *,
        spec: ContainerSpec = AGENT_SPEC,
        scope: str = DEFAULT_SCOPE,
        home_mb: int = HOME_MB,
        max_events: int = MAX_EVENTS,
        client: docker.DockerClient | None = None,
    ) -> AgentContainer:
        """A new agent container for the run (one left by an earlier driver of the
        run is removed first) with its relay listening; SandboxUnavailable when the
        engine, the image or the relay fails. Past ``max_events`` connection events
        (each model or tool request is a connection) the rest are counted in one
        ``egress_connections_omitted`` event at ``close``."""
        client = client or shared_client()
        try:
            container_id = cls._create(client, run_id, workspace_dir, spec, scope, home_mb)
        except ENGINE_ERRORS as exc:
            raise unavailable(exc, "starting the agent container") from None
        proxy = EgressProxy(AGENT_EGRESS, record, max_events, forwards={GATEWAY_PORT: Forward(gateway.host, gateway.port, gateway.prefix)})
        box = cls(client, container_id, run_id, gateway, proxy)
        try:
            proxy.start(box._attach_relay)
        except (EgressRefused, SandboxUnavailable, *ENGINE_ERRORS) as exc:
            box.close()
            raise SandboxUnavailable(f"the agent container's relay did not start: {exc}") from None
        return box

    @staticmethod
    def _create(client: docker.DockerClient, run_id: str, workspace_dir: Path, spec: ContainerSpec, scope: str, home_mb: int) -> str:
        found = [f"{LABEL_MANAGED}=1", f"{LABEL_RUN}={run_id}", f"{LABEL_ROLE}={ROLE_AGENT}", f"{LABEL_SCOPE}={scope}"]
        for existing in client.containers.list(all=True, sparse=True, filters={"label": found}):
            remove_container(client, existing.attrs["Id"])
        check_runtime(client, spec.runtime)
        name = container_name(scope, run_id, ROLE_AGENT)
        options = hardening(spec, str(workspace_dir.resolve()))
        home = f"rw,noexec,nosuid,nodev,size={home_mb}m,uid={AGENT_UID},gid={AGENT_UID},mode=0700"
        try:
            container = client.containers.create(
                spec.image,
                command=["python3", REAPER],
                name=name,
                labels=labels(run_id, ROLE_AGENT, scope, spec),
                # Nothing of the worker's: the agent's own environment is the caller's.
                environment={},
                tmpfs={**spec.tmpfs, HOME_DIR: home},
                hostname="agent",
                **options,
            )
        except ImageNotFound:
            raise SandboxUnavailable(f"agent image {spec.image} not found; build it with: bash sandbox/agent/image/build.sh") from None
        except APIError as exc:
            if exc.status_code != 409:
                raise
            remove_container(client, name)  # a stale container holds the name
            return AgentContainer._create(client, run_id, workspace_dir, spec, scope, home_mb)
        try:
            container.start()
        except ENGINE_ERRORS:
            remove_container(client, container.id)
            raise
        return str(container.id)

    def _attach_relay(self, argv: list[str]) -> Any:
        exec_id = self._client.api.exec_create(self.id, argv, user=SANDBOX_USER, workdir=SCRATCH, stdin=True, stdout=True, stderr=True)[
            "Id"
        ]
        return self._client.api.exec_start(exec_id, socket=True)

    def kill(self) -> None:
        """From any thread: the agent's output stream is cut here first (``run``
        returns at once) and the container removed with everything in it."""
        self._killed = True
        self._cut_stream()
        remove_container(new_client(timeout=10), self.id)

    @property
    def killed(self) -> bool:
        return self._killed

    def close(self) -> list[ev.EgressSummary]:
        """Remove the container (the agent and the relay with it) and end the proxy:
        every connection's event is written by then. What the agent reached or was
        refused, per destination. Idempotent."""
        if not self._closed:
            self._closed = True
            with contextlib.suppress(*ENGINE_ERRORS):
                remove_container(self._client, self.id)
            self._summaries = self._proxy.close()
        return self._summaries

    def __enter__(self) -> AgentContainer:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    # -- the agent ---------------------------------------------------------------

    def run(
        self,
        argv: Sequence[str],
        env: Mapping[str, str],
        files: Mapping[str, str] | None = None,
        *,
        on_output: OnOutput,
        timeout_seconds: float,
        workdir: str = WORKDIR,
    ) -> AgentResult:
        """Write ``files`` (paths relative to HOME) into the agent's HOME, then run
        ``argv`` as the agent with exactly ``env`` (nothing of the image's or the
        worker's is added but what the caller puts there: HOME, PATH, the token) and
        wait for it, its output going to ``on_output`` as it arrives. At
        ``timeout_seconds`` every process of the agent is killed. Raises
        SandboxUnavailable when it cannot start."""
        if self._killed or self._closed:
            raise SandboxUnavailable("the agent container was killed")
        if files:
            self.write_files(files)
        try:
            exec_id = self._client.api.exec_create(
                self.id, list(argv), user=AGENT_USER, workdir=workdir, environment=dict(env), stdout=True, stderr=True, tty=False
            )["Id"]
            sock = self._client.api.exec_start(exec_id, socket=True)
        except ENGINE_ERRORS as exc:
            raise unavailable(exc, "starting the agent") from None
        hit, ended = threading.Event(), threading.Event()
        deadline = threading.Timer(timeout_seconds, self._deadline, args=(hit, ended))
        deadline.daemon = True
        started = time.monotonic()
        deadline.start()
        try:
            self._stream_output(sock, on_output)
        finally:
            ended.set()
            deadline.cancel()
            deadline.join()
            sock.close()
        elapsed = time.monotonic() - started
        code = None if self._killed or hit.is_set() else execution_exit_code(self._client, exec_id)
        return AgentResult(exit_code=code, timed_out=hit.is_set(), killed=self._killed, duration_ms=int(elapsed * 1000))

    def write_files(self, files: Mapping[str, str]) -> None:
        """The files into HOME, as the agent (0600, directories 0700), through tar's
        standard input: the root is read-only and HOME a tmpfs the engine's archive
        API does not write."""
        archive = home_archive(files)
        try:
            exec_id = self._client.api.exec_create(
                self.id, ["tar", "-x", "-f", "-", "-C", HOME_DIR, "--no-same-owner"], user=AGENT_USER, stdin=True, stdout=True, stderr=True
            )["Id"]
            sock = self._client.api.exec_start(exec_id, socket=True)
        except ENGINE_ERRORS as exc:
            raise unavailable(exc, "writing the agent's files") from None
        raw = getattr(sock, "_sock", sock)
        raw.settimeout(FILES_SECONDS)
        said = b""
        try:
            raw.sendall(archive)
            raw.shutdown(socket.SHUT_WR)
            for _stream, data in frames(sock):
                said = (said + data)[-2000:]
        except OSError as exc:
            raise SandboxUnavailable(f"writing the agent's files: {exc}") from None
        finally:
            sock.close()
        code = execution_exit_code(self._client, exec_id)
        if code != 0:
            raise SandboxUnavailable(f"writing the agent's files failed ({code}): {said.decode(errors='replace').strip()}")

    def _stream_output(self, sock: Any, on_output: OnOutput) -> None:
        raw = getattr(sock, "_sock", sock)
        with self._stream_lock:
            already_killed = self._killed
            self._stream = None if already_killed else raw
        try:
            if hasattr(raw, "settimeout"):
                raw.settimeout(None)  # the deadline bounds the wait, not the socket
            if not already_killed:
                for stream, data in frames(sock):
                    on_output("stderr" if stream == 2 else "stdout", data)
        except OSError as exc:
            if not self._killed:
                log.warning("agent %s: the output stream broke off: %s", self.id[:12], exc)
        finally:
            with self._stream_lock:
                self._stream = None

    def _cut_stream(self) -> None:
        with self._stream_lock:
            if self._stream is not None:
                with contextlib.suppress(OSError):
                    self._stream.shutdown(socket.SHUT_RDWR)

    def _deadline(self, hit: threading.Event, ended: threading.Event) -> None:
        """Every process of the agent's uid killed (not the relay's, not PID 1); the
        container removed when even that cannot run."""
        hit.set()
        log.warning("agent %s: passed its deadline; killing its processes", self.id[:12])
        api = new_client(timeout=10).api
        try:
            exec_id = api.exec_create(self.id, KILL_ALL, user=AGENT_USER)["Id"]
            api.exec_start(exec_id)
        except ENGINE_ERRORS as exc:
            log.warning("agent %s: could not kill its processes (%s); removing the container", self.id[:12], exc)
            self.kill()
            return
        # A stream normally ends with its processes; one that does not is cut.
        if not ended.wait(STREAM_GRACE_SECONDS):
            self._cut_stream()


def home_archive(files: Mapping[str, str]) -> bytes:
    """A tar of ``files`` (relative paths, plain: no ``..``, nothing absolute) and
    the directories they need."""
    buffer = io.BytesIO()
    now = time.time()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        made: set[PurePosixPath] = set()
        for name, text in sorted(files.items()):
            path = PurePosixPath(name)
            if any(part in ("", ".", "..") for part in name.split("/")):
                raise ValueError(f"an agent's file must be a plain path under its home: {name!r}")
            for parent in reversed(path.parents[:-1]):
                if parent not in made:
                    made.add(parent)
                    folder = tarfile.TarInfo(str(parent))
                    folder.type, folder.mode, folder.mtime = tarfile.DIRTYPE, 0o700, int(now)
                    tar.addfile(folder)
            data = text.encode()
            info = tarfile.TarInfo(str(path))
            info.size, info.mode, info.mtime = len(data), 0o600, int(now)
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()
