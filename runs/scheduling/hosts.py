"""Worker hosts: which host holds a run's workspace, whether that host is alive, and
the queue that reaches it (docs/deploy.md, Several workers on several hosts).

A run sticks to the host that prepared (or last rebuilt) its workspace, ``Run.host``:
its wake-ups go to that host's own queue (``<HARNESS_QUEUE>.host.<name>``, which
every run worker there consumes beside the shared one) while the host's heartbeat
lasts, so the host resumes its own runs with the workspace on its disk. A host whose
heartbeat ran out (one lease period, HARNESS_LEASE_SECONDS) is gone: its runs' wake-ups
go to the shared queue, and whichever worker claims a run rebuilds its workspace
(runs/placement.py). No worker's disk is needed by anyone else."""

from __future__ import annotations

import logging
import threading
from datetime import timedelta

from django.conf import settings
from django.db import close_old_connections, connection
from django.utils import timezone

from runs.models import Run, WorkerHost

log = logging.getLogger(__name__)


def this_host() -> str:
    return str(settings.HARNESS_WORKER_HOST)


def host_queue(name: str) -> str:
    """The queue only the run workers of host ``name`` consume."""
    return f"{settings.CELERY_TASK_DEFAULT_QUEUE}.host.{name}"


def beat(name: str | None = None) -> None:
    """Say the host is alive for one more lease period."""
    name = name or this_host()
    now = timezone.now()
    expires = now + timedelta(seconds=settings.HARNESS_LEASE_SECONDS)
    WorkerHost.objects.update_or_create(name=name, defaults={"queue": host_queue(name), "seen_at": now, "expires_at": expires})


def alive(name: str) -> bool:
    return WorkerHost.objects.filter(name=name, expires_at__gt=timezone.now()).exists()


def live_holder(run_id: str) -> str | None:
    """The live host, other than this one, that holds the run's workspace; None when
    this host may drive the run (its own, nobody's, or a host that is gone)."""
    host = Run.objects.filter(pk=run_id).values_list("host", flat=True).first()
    if not host or host == this_host() or not alive(host):
        return None
    return str(host)


def queue_for(run_id: str) -> str | None:
    """Where a wake-up of the run goes: its host's queue while that host is alive, else
    the shared queue (None: the default route)."""
    host = Run.objects.filter(pk=run_id).values_list("host", flat=True).first()
    if host and alive(host):
        return host_queue(host)
    return None


class Heartbeat:
    """Renews this host's heartbeat from a daemon thread of a run worker, three times per
    lease period, for as long as the process lives; a killed worker stops renewing, and
    its host is gone once the last renewal runs out."""

    def __init__(self, name: str | None = None) -> None:
        self.name = name or this_host()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="host-heartbeat", daemon=True)

    def start(self) -> Heartbeat:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)

    def _run(self) -> None:
        every = settings.HARNESS_LEASE_SECONDS / 3
        try:
            while True:
                try:
                    close_old_connections()
                    beat(self.name)
                except Exception:  # a database blip must not end the heartbeat; the next one retries
                    log.warning("host %s: heartbeat not recorded", self.name, exc_info=True)
                if self._stop.wait(every):
                    return
        finally:
            connection.close()
