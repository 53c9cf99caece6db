"""The Celery app. Runs are driven by workers; a lost worker's task is redelivered
(acks_late + reject_on_worker_lost) and the run's lease keeps it single-driver."""

from __future__ import annotations

import gc
import os

from celery import Celery
from celery.signals import worker_init, worker_process_init

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "harness_site.settings")

app = Celery("harness")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks(["runs"])


@worker_init.connect
@worker_process_init.connect
def freeze_startup_objects(**_: object) -> None:
    # What a worker loaded before its first task lives as long as the process. Frozen,
    # it is left out of the collector's full passes (100 ms and more over the app's
    # startup objects, as in the web process: harness_site/asgi.py), which would stall
    # a run's step and the broadcast of its events to the live trace. In the pool's
    # children too: what they load after the fork is theirs.
    gc.freeze()
