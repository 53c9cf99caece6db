"""Each project's queue (docs/design.md, Trust boundaries): at most ``Project.max_active_runs``
of its runs are active at once (running or waiting for approval: a waiting run keeps
its workspace and its place); the rest wait, first in first out, and start when a
slot frees.

The slots themselves are runs.scheduling.slots'.

A queued run is never driven (``runs.runtime.advance`` leaves it); ``dispatch``
admits the oldest queued runs while slots are free and hands each to a worker. It
runs after a run is created queued, after a run ends, when a project's switch or cap
changes, and in the beat's sweep, which repairs a dispatch that was lost."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from django.db import transaction

from core.fences import RowLock
from projects.models import Project
from runs.models import Run
from runs.persistence.store import DjangoStore, load_state
from runs.scheduling.queue import enqueue_start
from runs.scheduling.slots import claim_slot, run_ended

log = logging.getLogger(__name__)

# A queued run has no driver: the conditional UPDATE that admits it holds its row's lock
# to the end of the admission's transaction, which writes its state.
ADMITTING = RowLock("the run's admission from its project's queue")


def queue_of(project_id: int) -> list[str]:
    """The project's queued runs, first in first out (creation order; the id breaks a tie)."""
    queued = Run.objects.filter(project_id=project_id, queued=True).order_by("created_at", "pk")
    return [str(pk) for pk in queued.values_list("pk", flat=True)]


def admit_new(run: Run) -> bool:
    """For ``create_run``, in the transaction that created ``run``: admit it at once if
    nobody is queued ahead of it in a project that is not paused and a slot is free;
    queue it otherwise. True when admitted."""
    project_id = run.project_id
    assert project_id is not None  # every run has a project (its column's default)
    ahead = Run.objects.filter(project_id=project_id, queued=True).exclude(pk=run.pk).exists()
    paused = Project.objects.filter(pk=project_id, paused=True).exists()
    admitted = not ahead and not paused and claim_slot(project_id)
    # The row was inserted by this transaction: nobody else sees it yet.
    Run.objects.filter(pk=run.pk).update(holds_slot=admitted, queued=not admitted)
    run.refresh_from_db(fields=["holds_slot", "queued"])
    return admitted


def dispatch(project_id: int) -> list[str]:
    """Admit the project's queued runs, oldest first, while it is not paused and has a
    free slot; each admitted run goes to a worker once its admission is committed.
    Returns the runs admitted."""
    admitted: list[str] = []
    while True:
        with transaction.atomic():
            if Project.objects.filter(pk=project_id, paused=True).exists() or not claim_slot(project_id):
                return admitted
            # Read after the claim: on PostgreSQL a dispatcher that waited for the
            # project row's lock sees the runs the one before it admitted.
            # A run killed while queued is left to its driver, which stops it unstarted.
            head = Run.objects.filter(project_id=project_id, queued=True, kill_requested=False).order_by("created_at", "pk").first()
            # The run's own conditional UPDATE: of dispatchers that chose the same head,
            # one admits it. No head, or a lost race: the slot goes back (rollback).
            if head is None or Run.objects.filter(pk=head.pk, queued=True).update(queued=False, holds_slot=True) != 1:
                transaction.set_rollback(True)
                if head is None:
                    return admitted
                continue
            start_clock(head)
            run_id = str(head.pk)
            transaction.on_commit(lambda started=run_id: enqueue_start(started))  # type: ignore[misc]
        admitted.append(run_id)


def start_clock(run: Run) -> None:
    """Time in the queue is not working time: an admitted run's deadline counts from its
    admission. Nothing has driven it yet (no event), so its state is as created."""
    state = load_state(run)
    now = time.time()
    state.started_at = now
    state.deadline = now + state.limits.wall_time_seconds
    DjangoStore(ADMITTING).checkpoint(state, [])


def sweep() -> list[str]:
    """The beat's repair: give back the slots of runs that ended holding one (none
    should), and dispatch every project with a queue. Returns the runs admitted."""
    for run_id in Run.objects.filter(holds_slot=True, status__in=(Run.Status.COMPLETE, Run.Status.STOPPED)).values_list("pk", flat=True):
        with transaction.atomic():
            run_ended(str(run_id))
    admitted: list[str] = []
    for project_id in Run.objects.filter(queued=True).values_list("project_id", flat=True).distinct():
        admitted += dispatch(project_id)
    return admitted


@dataclass(frozen=True)
class Place:
    """Where a queued run stands: its position (1: next) and why it waits."""

    position: int
    reason: str


def places(runs: list[Run]) -> dict[str, Place]:
    """The queue places of the queued runs among ``runs`` (one query per project)."""
    found: dict[str, Place] = {}
    for project_id in {run.project_id for run in runs if run.queued and run.project_id is not None}:
        project = Project.objects.get(pk=project_id)
        if project.paused:
            reason = f"project {project.slug} is paused: no run starts until an operator resumes it"
        elif project.max_active_runs is not None:
            reason = f"project {project.slug} runs at most {project.max_active_runs} at once ({project.active_runs} active)"
        else:
            reason = "waiting for a worker to admit it"
        for position, run_id in enumerate(queue_of(project_id), start=1):
            found[run_id] = Place(position, reason)
    return found
