"""The line between a check that ran and a sandbox that failed.

Only a command that ran to its end (its own exit status, or one of our limits: the
timeout, the output cap, memory, pids) says anything about the workspace. Whatever
the engine does to an attempt instead (a lost connection, an error answer, a
container or image that is gone) is a failure of the infrastructure: the attempt is
retried in a fresh container and is never evidence. ``unavailable`` turns the engine
client's errors into that verdict; ``wait_for_engine`` waits for an engine that does
not answer at all."""

from __future__ import annotations

import threading
import time

import requests
from docker.errors import APIError, DockerException, ImageNotFound, NotFound

from sandbox.container.client import docker_host, forget_shared_client, new_client

# What the engine's client raises when the engine, not our request, is the problem.
ENGINE_ERRORS = (DockerException, requests.RequestException, OSError)
PING_SECONDS = 0.5


class SandboxUnavailable(Exception):
    """The engine or the container failed the attempt: no command ran to its end, so
    nothing it did counts. ``engine_down``: the engine itself did not answer (worth
    waiting for), rather than answering that something is missing. ``lasting``: what
    is missing stays missing until an operator changes the engine's configuration
    (a runtime it has not registered), so another attempt would fail the same way.
    An image is not: it may be built or tagged between attempts."""

    def __init__(self, reason: str, *, engine_down: bool = False, lasting: bool = False) -> None:
        super().__init__(reason)
        self.reason = reason
        self.engine_down = engine_down
        self.lasting = lasting


def unavailable(exc: BaseException, doing: str) -> SandboxUnavailable:
    """What an engine client error means for the attempt, named for an operator."""
    if isinstance(exc, SandboxUnavailable):
        return exc
    if isinstance(exc, ImageNotFound):
        return SandboxUnavailable(f"{doing}: the sandbox image is missing on the engine ({exc.explanation})")
    if isinstance(exc, NotFound):
        return SandboxUnavailable(f"{doing}: the sandbox container no longer exists")
    # A client that may hold connections to an engine that went away is not reused.
    forget_shared_client()
    if isinstance(exc, APIError):
        # 5xx: the engine is failing (shutting down, out of resources): wait for it.
        failing = exc.status_code is None or exc.status_code >= 500
        return SandboxUnavailable(f"{doing}: the sandbox engine answered {exc.status_code} ({exc.explanation})", engine_down=failing)
    # A refused or broken connection, or no engine to ask for its API version.
    return SandboxUnavailable(f"{doing}: the sandbox engine at {docker_host()} did not answer ({type(exc).__name__})", engine_down=True)


def engine_answers() -> bool:
    try:
        client = new_client(timeout=5)
    except ENGINE_ERRORS:
        return False
    try:
        return bool(client.ping())
    except ENGINE_ERRORS:
        return False
    finally:
        client.close()


def wait_for_engine(until: float, wake: threading.Event) -> bool:
    """Ping the engine until it answers (True), or ``until`` (epoch seconds) passes or
    ``wake`` is set (False)."""
    while True:
        if engine_answers():
            return True
        remaining = until - time.time()
        if remaining <= 0 or wake.wait(min(PING_SECONDS, remaining)):
            return False
