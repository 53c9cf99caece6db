"""Handing a run to a Celery worker: the only module that names the run tasks on the
broker. Publishing by name keeps the callers (the composition root, the kill switch,
the approval flow's wake-ups) free of the task module, which imports the composition
root.

A wake-up goes to the queue of the host that holds the run's workspace while that host
is alive, so it resumes its own runs; otherwise to the shared queue (runs/scheduling/hosts.py). A
new run has no host yet: any worker may prepare it."""

from __future__ import annotations

import logging

from celery import current_app

from runs.scheduling import hosts

log = logging.getLogger(__name__)


def enqueue_start(run_id: str) -> None:
    current_app.send_task("runs.start_run", args=[run_id])


def enqueue_resume(run_id: str) -> None:
    """Wake the run's driver. If the broker is down the decision still stands: the
    beat's sweep wakes waiting runs that have a decision."""
    try:
        current_app.send_task("runs.resume_run", args=[run_id], queue=hosts.queue_for(run_id))
    except Exception:  # the database holds the decision; the sweep retries
        log.warning("could not enqueue resume of run %s", run_id, exc_info=True)


def enqueue_dispatch(project_id: int) -> None:
    """Move the project's queue on (runs.project_queue.dispatch) on a worker. If the broker
    is down the slot is still free: the beat's sweep dispatches every queue."""
    try:
        current_app.send_task("runs.dispatch", args=[project_id])
    except Exception:  # the database holds the slots; the sweep retries
        log.warning("could not enqueue the dispatch of project %s", project_id, exc_info=True)
