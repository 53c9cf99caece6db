"""Docker SDK clients for the engine the composition root names (``use_engine_host``;
runs.apps points it at ``settings.DOCKER_HOST``), else Docker's own ``DOCKER_HOST``."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable

import docker

DEFAULT_TIMEOUT = 60
_local = threading.local()


def _docker_convention() -> str:
    return os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")


# Read on every call, so a change of the source's value (a test's override) is seen.
_host_source: Callable[[], str] = _docker_convention


def use_engine_host(source: Callable[[], str]) -> None:
    global _host_source
    _host_source = source


def docker_host() -> str:
    return _host_source()


def new_client(timeout: int = DEFAULT_TIMEOUT) -> docker.DockerClient:
    """A client with its own connection pool: the kill switch uses one so it is
    never queued behind a stream the driving thread is blocked on."""
    return docker.DockerClient(base_url=docker_host(), timeout=timeout)


def shared_client() -> docker.DockerClient:
    """One client per thread and engine (requests sessions are not safe to share)."""
    clients: dict[str, docker.DockerClient] = _local.__dict__.setdefault("clients", {})
    host = docker_host()
    if host not in clients:
        clients[host] = new_client()
    return clients[host]


def forget_shared_client() -> None:
    """Drop this thread's client for the current engine (its pooled connections may lead
    to an engine that went away); the next ``shared_client`` makes a new one. It is not
    closed: a container may still hold it for a last best-effort call."""
    _local.__dict__.get("clients", {}).pop(docker_host(), None)
