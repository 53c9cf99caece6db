"""A project's slots (runs.project_queue): one unit of ``Project.active_runs`` each. A slot
is claimed with a conditional UPDATE whose row count says whether the claim won
(``claim_slot``), so any number of processes may admit runs at once and the cap still
holds; it is given back in the transaction that writes the run's end (``run_ended``,
from the store), so the count never drifts from the runs that hold one
(``Run.holds_slot``)."""

from __future__ import annotations

from django.db import transaction
from django.db.models import F, Q

from projects.models import Project
from runs.models import Run
from runs.scheduling.queue import enqueue_dispatch


def claim_slot(project_id: int) -> bool:
    """Take one of the project's slots if one is free (or the project has no cap).
    The conditional UPDATE is the claim: of claimers of the last free slot, exactly one
    gets row count 1. (On PostgreSQL the UPDATE holds the project row's lock to the end
    of the caller's transaction: a second claimer waits, then re-evaluates the
    condition against the count the first committed; SQLite runs one writer at a time.)"""
    free = Q(max_active_runs__isnull=True) | Q(active_runs__lt=F("max_active_runs"))
    return Project.objects.filter(pk=project_id).filter(free).update(active_runs=F("active_runs") + 1) == 1


def run_ended(run_id: str) -> None:
    """In the transaction that writes the run's end: it leaves the queue (a queued run
    killed) or gives its slot back, once (the conditional UPDATE: a final checkpoint
    written again finds nothing to give), and the queue moves on after the commit."""
    Run.objects.filter(pk=run_id, queued=True).update(queued=False)
    project_id = Run.objects.filter(pk=run_id, holds_slot=True).values_list("project_id", flat=True).first()
    if project_id is None or Run.objects.filter(pk=run_id, holds_slot=True).update(holds_slot=False) != 1:
        return
    Project.objects.filter(pk=project_id, active_runs__gt=0).update(active_runs=F("active_runs") - 1)
    transaction.on_commit(lambda: enqueue_dispatch(project_id))
