"""The Celery app. Runs are driven by workers; a lost worker's task is redelivered
(acks_late + reject_on_worker_lost) and the run's lease keeps it single-driver."""

from __future__ import annotations

import gc
import os
from typing import Any

from celery import Celery
from celery.signals import celeryd_after_setup, worker_init, worker_process_init, worker_process_shutdown, worker_ready, worker_shutdown

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "harness_site.settings")

app = Celery("harness")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks(["runs", "ledger"])


@worker_init.connect
@worker_process_init.connect
def freeze_startup_objects(**_: object) -> None:
    # What a worker loaded before its first task lives as long as the process. Frozen,
    # it is left out of the collector's full passes (100 ms and more over the app's
    # startup objects, as in the web process: harness_site/asgi.py), which would stall
    # a run's step and the broadcast of its events to the live trace. In the pool's
    # children too: what they load after the fork is theirs.
    gc.freeze()


_drives_runs = False


@celeryd_after_setup.connect
def consume_host_queue(sender: str, instance: Any, **_: object) -> None:
    """A run worker consumes its host's own queue beside the shared one: the wake-ups
    of the runs whose workspace is on this host's disk (runs/scheduling/hosts.py). The notifier,
    which consumes only the webhook queue, drives no runs and does neither."""
    global _drives_runs
    from django.conf import settings

    from runs.scheduling import hosts

    queues = instance.app.amqp.queues
    if settings.CELERY_TASK_DEFAULT_QUEUE in queues.consume_from:
        _drives_runs = True
        queues.select_add(hosts.host_queue(hosts.this_host()))


@worker_ready.connect
def start_host_heartbeat(**_: object) -> None:
    """The host is alive while one of its run workers renews its heartbeat."""
    if _drives_runs:
        from runs.scheduling import hosts

        hosts.Heartbeat().start()


@worker_ready.connect
def serve_metrics(**_: object) -> None:
    """A worker on a host without a web server serves the host's figures itself
    (HARNESS_WORKER_METRICS_PORT; docs/deploy.md, Metrics)."""
    from monitoring.worker import serve

    serve()


@worker_process_shutdown.connect
def forget_pool_process(pid: int, **_: object) -> None:
    from common.metrics import process_ended

    process_ended(pid)


@worker_process_shutdown.connect
@worker_shutdown.connect
def drain_container_pool(**_: object) -> None:
    """The idle containers a process started for runs to come go with it (a process
    killed outright leaves them to the sweep: sandbox/container/pool.py)."""
    from sandbox.public import drain_pool

    drain_pool()
