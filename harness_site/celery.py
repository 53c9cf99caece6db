"""The Celery app. Runs are driven by workers; a lost worker's task is redelivered
(acks_late + reject_on_worker_lost) and the run's lease keeps it single-driver."""

from __future__ import annotations

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "harness_site.settings")

app = Celery("harness")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks(["runs", "approvals"])
