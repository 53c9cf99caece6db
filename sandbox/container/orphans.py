"""Sandbox containers found again by the run they belong to, and removed. Every
container a run has, whatever its role (``sandbox.container.spec``), carries the
run's id in its run label, so what belongs to a run is one label filter; which
runs' containers may go is decided by the runs' side (``runs.container_sweep``, on
the beat), which alone knows whether a run ended or is still being driven.

A container the pool started (``sandbox.container.pool``) has no run label: once a run
took it, its name is the run's container name, which names the run; while idle it is
nobody's and left alone as long as the process that owns it lives, and listed as no
run's (so the sweep removes it) once that process died."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection
from typing import Any

import docker

from sandbox.container.client import shared_client
from sandbox.container.pool import LABEL_POOL, idle_name, owner_alive
from sandbox.container.spec import DEFAULT_SCOPE, LABEL_MANAGED, LABEL_ROLE, LABEL_RUN, LABEL_SCOPE, remove_container, run_of_name


def containers_by_run(
    *, scope: str = DEFAULT_SCOPE, run_id: str | None = None, client: docker.DockerClient | None = None
) -> dict[str, list[str]]:
    """This scope's managed containers (only ``run_id``'s, if given): run id to
    container ids; a container without a run label is under ""."""
    client = client or shared_client()
    found: dict[str, list[str]] = defaultdict(list)
    # Sparse: one list call and no inspect per container, which would fail on a
    # container being removed meanwhile (a run's own close, a kill). Not filtered by
    # the run's label: a pooled container the run took has none.
    for container in client.containers.list(all=True, sparse=True, filters={"label": [f"{LABEL_MANAGED}=1", f"{LABEL_SCOPE}={scope}"]}):
        owner = run_of(container.attrs, scope)
        if owner is not None and (run_id is None or owner == run_id):
            found[owner].append(container.attrs["Id"])
    return dict(found)


def run_of(attrs: dict[str, Any], scope: str) -> str | None:
    """The run a container (as the engine lists it) belongs to, "" for none, or None
    for an idle pooled container whose owner lives."""
    labels = attrs.get("Labels") or {}
    owner = labels.get(LABEL_POOL)
    if owner is None:
        return str(labels.get(LABEL_RUN, ""))
    name = str((attrs.get("Names") or [""])[0]).lstrip("/")
    if idle_name(name, scope):
        return None if owner_alive(owner) else ""
    return run_of_name(name, scope, labels.get(LABEL_ROLE, "")) or ""


def remove_containers(container_ids: Collection[str], *, client: docker.DockerClient | None = None) -> int:
    """Remove these containers; how many were still there."""
    client = client or shared_client()
    return sum(remove_container(client, container_id) for container_id in container_ids)


def sweep_orphans(active_run_ids: Collection[str], *, scope: str = DEFAULT_SCOPE, client: docker.DockerClient | None = None) -> list[str]:
    """Remove every container of this scope whose run is not in ``active_run_ids``,
    whatever its role; return those runs (tests and benchmarks clean up with it)."""
    client = client or shared_client()
    keep = {str(r) for r in active_run_ids}
    found = containers_by_run(scope=scope, client=client)
    return sorted(run_id for run_id, ids in found.items() if run_id not in keep and remove_containers(ids, client=client))
