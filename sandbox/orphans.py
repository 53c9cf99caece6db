"""The sweep that removes sandbox containers left behind: those of this scope whose
run is no longer active (a worker died before removing its container). The worker
runs it periodically (``runs.tasks``)."""

from __future__ import annotations

import docker

from sandbox.container_spec import DEFAULT_SCOPE, LABEL_MANAGED, LABEL_RUN, LABEL_SCOPE, remove_container
from sandbox.docker_client import shared_client


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
