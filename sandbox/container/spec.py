"""What a sandbox container is made of: the fixed defaults it is created with
(docs/design.md, Trust boundaries), the run's policy limits (``ContainerSpec``), the
labels that find it again, the runtime it needs, and what its mounts must be
(``writable_mounts``). Creating and removing one are here; driving one is
``sandbox.container.sandbox_container``."""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import asdict, dataclass, field
from typing import Any

import docker
from docker.errors import APIError, NotFound
from docker.models.containers import Container
from docker.types import Mount, Ulimit

from core.policy import SandboxLimits
from sandbox.container.engine import SandboxUnavailable
from sandbox.container.seccomp import profile_digest, security_option

SANDBOX_USER = "65534:65534"
WORKDIR = "/workspace"
LABEL_MANAGED = "harness.managed"
# Whose and what for: every container of a run carries the run's own id, and its role
# within the run tells the run's containers apart (the sweep keeps or removes them
# by run, never by role: runs.container_sweep).
LABEL_RUN = "harness.run_id"
LABEL_ROLE = "harness.role"
LABEL_SCOPE = "harness.scope"
LABEL_SPEC = "harness.spec"
ROLE_MAIN = "main"
DEFAULT_SCOPE = "default"
SCRATCH = "/tmp"
# Fixed by trusted code, never copied from the worker. The workspace is mounted
# read-only, so whatever a check writes (caches, build output) must go to the scratch
# tmpfs; these point the usual tools there. Bytecode needs nothing: Python skips
# writing it where it cannot (and a PYTHONPYCACHEPREFIX would hide the image's own
# compiled stdlib, making every check compile it again).
SANDBOX_ENV = {"HOME": SCRATCH, "TMPDIR": SCRATCH, "XDG_CACHE_HOME": f"{SCRATCH}/.cache"}
# The programs every container runs, files of the image (sandbox/image/harness):
# PID 1 reaps every orphan; every check runs under the wrapper (a check with egress
# has the relay beside it too: sandbox.egress.protocol.RELAY).
PROGRAMS = "/opt/harness"
REAPER = f"{PROGRAMS}/reaper.py"
CHECK_WRAPPER = f"{PROGRAMS}/check.sh"


class RuntimeMissing(SandboxUnavailable):
    """The policy asks for a container runtime the engine does not have."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason, lasting=True)


# Under gVisor the host cgroup counts the sandbox's own threads, and the sandbox's
# kernel dies when it cannot make one. Measured with runsc's ptrace platform: about
# 40 host threads for the sandbox itself, and a fork bomb held at 128 processes by
# the sandbox's nproc limit peaked at 2,300-2,800 host threads (up to 22 each), so
# the host budget leaves room for the sandbox's own limit to act first.
RUNSC_BASE_PIDS = 64
RUNSC_PIDS_PER_TASK = 32
# gVisor is given the sandbox's seccomp profile like runc, but (Debian 12's release)
# ignores it: with --oci-seccomp it would filter only the container's first process,
# never the `docker exec` processes every check is, and it answers EPERM where the
# profile says ENOSYS, which breaks the C library's clone3 fallback. A check's system
# calls reach gVisor's own kernel, io_uring included, which runs on the host under
# gVisor's own filter (docs/design.md, Trust boundaries).
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
    # Not a policy limit: the sandbox's seccomp profile, so that a container made
    # under an older profile is not reused (its digest is in the spec's).
    seccomp: str = field(default_factory=profile_digest)

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


def pinned_role(image: str) -> str:
    """The role of the container of checks pinned to ``image``: one per image, so
    checks pinned to two images each find their own again."""
    return f"pinned-{hashlib.sha256(image.encode()).hexdigest()[:12]}"


def container_name(scope: str, run_id: str, role: str) -> str:
    return docker_name(f"harness-{scope}-{run_id}-{role}")[:200]


def docker_name(text: str) -> str:
    """``text`` with what Docker refuses in a container's name replaced."""
    return re.sub(r"[^a-zA-Z0-9_.-]", "-", text)


def run_of_name(name: str, scope: str, role: str) -> str | None:
    """The run whose container in ``role`` is called ``name`` (``container_name``'s
    inverse), or None. Exact only for a run id the name carries unchanged, which is why
    the pool hands its containers only to such runs (``sandbox.container.pool``)."""
    prefix, suffix = _name_parts(scope, role)
    if len(name) > len(prefix) + len(suffix) and name.startswith(prefix) and name.endswith(suffix):
        return name[len(prefix) : len(name) - len(suffix)]
    return None


def _name_parts(scope: str, role: str) -> tuple[str, str]:
    return docker_name(f"harness-{scope}-"), docker_name(f"-{role}")


def create_container(client: docker.DockerClient, run_id: str, role: str, source: str, spec: ContainerSpec, scope: str) -> Container:
    """A new container for the run in ``role`` (not started yet), the workspace at
    ``source`` mounted read-only."""
    return create_named(client, container_name(scope, run_id, role), labels(run_id, role, scope, spec), source, spec)


def create_named(client: docker.DockerClient, name: str, labels: dict[str, str], source: str, spec: ContainerSpec) -> Container:
    """A new sandbox container (not started yet) called ``name``: a run's, or one the
    pool starts before any run asks (``sandbox.container.pool``), made alike."""
    return client.containers.create(
        spec.image,
        command=["python3", REAPER],
        name=name,
        labels=labels,
        environment=dict(SANDBOX_ENV),
        tmpfs=spec.tmpfs,
        hostname="sandbox",
        **hardening(spec, source),
    )


def labels(run_id: str, role: str, scope: str, spec: ContainerSpec) -> dict[str, str]:
    """What finds a container again: managed, its run, its role, the installation's
    scope (the orphan sweep's filter) and the spec it was made with."""
    return {LABEL_MANAGED: "1", LABEL_RUN: run_id, LABEL_ROLE: role, LABEL_SCOPE: scope, LABEL_SPEC: spec.digest}


def hardening(spec: ContainerSpec, source: str) -> dict[str, Any]:
    """The options every container of the sandbox is created with (docs/design.md,
    Trust boundaries), a run's check container and an agent's alike (sandbox/agent):
    the sandbox user, no network, the project's seccomp profile, no capability, a
    read-only root, the policy's limits and the workspace at ``source`` mounted
    read-only. Its command, environment, scratch and name are the caller's."""
    return {
        "user": SANDBOX_USER,
        "working_dir": WORKDIR,
        "network_mode": spec.network,
        # Names resolve nowhere but the container's own loopback, where a check with
        # egress has the relay refusing (and reporting) each lookup; the sandbox user
        # may bind that port in the container's own network namespace alone.
        "dns": ["127.0.0.1"],
        "sysctls": {"net.ipv4.ip_unprivileged_port_start": "0"},
        "read_only": True,
        "cap_drop": ["ALL"],
        # The project's own profile, not the engine's default (sandbox/container/seccomp.py).
        "security_opt": ["no-new-privileges", security_option()],
        "mem_limit": spec.memory,
        "memswap_limit": spec.memory,
        "nano_cpus": int(spec.cpus * 1_000_000_000),
        "pids_limit": spec.host_pids_limit,
        "ulimits": spec.ulimits,
        # Read-only: only the harness's own file tools write the workspace, so a
        # check observes it and never changes it.
        "mounts": [Mount(target=WORKDIR, source=source, type="bind", read_only=True)],
        "runtime": spec.runtime,
        "stop_signal": "SIGKILL",
        "detach": True,
    }


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
