"""The beat's sweep of sandbox containers (docs/design.md, Recovery): which runs'
containers may go. It decides by run, never by role: every container of a run
carries the run's id (``sandbox.container.orphans``), so a pinned image's container is kept
exactly as long as the run's main one.

- A run that ended (or a label that is no run's) keeps nothing: an ended run is
  never driven again, and its driver removes its containers itself unless the
  engine would not let it.
- A run that is running or waiting keeps everything while a driver holds its lease,
  and for a lease period after that lease ran out. A driver whose lease ran out has
  lost the run already (the lease sweep hands it to another worker, whose start
  reuses these very containers and kills what the old driver left running in them),
  so the extra period only spares a driver late to renew from losing its check to
  this sweep rather than to a takeover.
- A running or waiting run nobody holds (its lease released, or run out for that
  long) is claimed by the sweep under the run's lease before its containers are
  removed, so no worker can start or reuse one of them meanwhile; the claim is
  released at once, and the run is resumed as any undriven run is."""

from __future__ import annotations

import logging
import uuid
from datetime import datetime, timedelta

from django.conf import settings
from django.utils import timezone

from runs.models import Run
from runs.runtime import worker_identity
from runs.scheduling import leases
from sandbox.public import containers_by_run, remove_containers

log = logging.getLogger(__name__)

ENDED = (Run.Status.COMPLETE, Run.Status.STOPPED)


def _is_run_id(label: str) -> bool:
    try:
        uuid.UUID(label)
    except ValueError:
        return False
    return True


def sweep(scope: str) -> list[str]:
    """Remove the containers of this scope's runs that ended or that nobody drives
    (see the module's docstring); return those runs."""
    # Listed before the runs are read: a container created after this list (by a run
    # the read would find younger than it) is left for the next sweep.
    found = containers_by_run(scope=scope)
    runs = {
        str(pk): (status, expires)
        for pk, status, expires in Run.objects.filter(pk__in=[r for r in found if _is_run_id(r)]).values_list(
            "pk", "status", "lease_expires_at"
        )
    }
    idle = settings.HARNESS_LEASE_SECONDS
    removed = []
    for run_id, container_ids in sorted(found.items()):
        status, expires = runs.get(run_id, (None, None))
        if status is None or status in ENDED:
            gone = remove_containers(container_ids)
        elif _undriven(expires, idle):
            gone = _remove_claimed(run_id, scope, idle)
        else:
            continue
        if gone:
            removed.append(run_id)
    return removed


def _undriven(expires: datetime | None, idle: float) -> bool:
    return expires is None or expires <= timezone.now() - timedelta(seconds=idle)


def _remove_claimed(run_id: str, scope: str, idle: float) -> int:
    """Remove an undriven run's containers under its lease (the claim is the
    conditional UPDATE that decides: a driver that took the run since the read wins)."""
    token = leases.acquire(run_id, f"sandbox.sweep:{worker_identity()}", idle_seconds=idle)
    if token is None:
        return 0
    try:
        # Listed again under the claim: whatever a driver made before it is included.
        ids = containers_by_run(scope=scope, run_id=run_id).get(run_id, [])
        gone = remove_containers(ids)
        log.info("run %s: nobody drives it; removed %d of its sandbox containers", run_id, gone)
        return gone
    finally:
        leases.release(run_id, token)
