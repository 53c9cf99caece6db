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


class EngineAPIClient(docker.APIClient):  # type: ignore[misc]  # docker-py has no types
    """docker-py's low-level client (a ``requests.Session``) that never reads the
    environment for proxies, a netrc or a CA bundle (``trust_env``, requests' public
    attribute), from its construction on: the SDK's constructor already sends a request
    (the engine's API version), so setting the attribute afterwards would be too late
    for that one, and a proxy meant for the outside would get it."""

    @property
    def trust_env(self) -> bool:
        return False

    @trust_env.setter
    def trust_env(self, value: bool) -> None:
        """requests.Session's constructor sets it; the engine is reached directly."""


def new_client(timeout: int = DEFAULT_TIMEOUT) -> docker.DockerClient:
    """A client with its own connection pool: the kill switch uses one so it is
    never queued behind a stream the driving thread is blocked on.

    The engine is reached where ``docker_host`` says, directly (``EngineAPIClient``):
    re-reading the environment cost every request about 1.3 million instructions
    (bench/check_floor.py), and a worker's HTTP(S)_PROXY, meant for the outside, must
    not carry its engine's API. TLS, when a client is given a ``docker.tls.TLSConfig``,
    sets the session's own ``verify`` and ``cert``, which this leaves alone.
    ``DockerClient.api`` is the SDK's documented low-level client: this one is it."""
    api = EngineAPIClient(base_url=docker_host(), timeout=timeout)
    # With the version given, the SDK's own low-level client sends nothing; it is
    # replaced before any use.
    client = docker.DockerClient(base_url=docker_host(), version=api.api_version, timeout=timeout)
    client.api.close()
    client.api = api
    return client


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
