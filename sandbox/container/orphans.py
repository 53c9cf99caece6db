"""Sandbox containers found again by the run they belong to, and removed. Every
container a run has, whatever its role (``sandbox.container.spec``), carries the
run's id in its run label, so what belongs to a run is one label filter; which
runs' containers may go is decided by the runs' side (``runs.container_sweep``, on
the beat), which alone knows whether a run ended or is still being driven."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection

import docker

from sandbox.container.client import shared_client
from sandbox.container.spec import DEFAULT_SCOPE, LABEL_MANAGED, LABEL_RUN, LABEL_SCOPE, remove_container


def containers_by_run(
    *, scope: str = DEFAULT_SCOPE, run_id: str | None = None, client: docker.DockerClient | None = None
) -> dict[str, list[str]]:
    """This scope's managed containers (only ``run_id``'s, if given): run id to
    container ids; a container without a run label is under ""."""
    client = client or shared_client()
    labels = [f"{LABEL_MANAGED}=1", f"{LABEL_SCOPE}={scope}"] + ([f"{LABEL_RUN}={run_id}"] if run_id is not None else [])
    found: dict[str, list[str]] = defaultdict(list)
    # Sparse: one list call and no inspect per container, which would fail on a
    # container being removed meanwhile (a run's own close, a kill).
    for container in client.containers.list(all=True, sparse=True, filters={"label": labels}):
        found[(container.attrs.get("Labels") or {}).get(LABEL_RUN, "")].append(container.attrs["Id"])
    return dict(found)


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
