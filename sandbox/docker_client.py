"""Docker SDK clients for the engine at ``settings.DOCKER_HOST``."""

from __future__ import annotations

import os
import threading

import docker

DEFAULT_TIMEOUT = 60
_local = threading.local()


def docker_host() -> str:
    from django.conf import settings

    if settings.configured or os.environ.get("DJANGO_SETTINGS_MODULE"):
        return str(settings.DOCKER_HOST)
    # Outside Django (a script): Docker's own convention.
    return os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")


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
