"""A run's outcome as every surface tells it (pages, lists, the inbox, the overview, the
API, mail, webhooks, traces): core.outcome's words for the run's state, and ``queued``
for a run its project's queue has not admitted yet, which only the server knows (its
row says ``running``, but nothing of it runs and no clock of it ticks)."""

from __future__ import annotations

from core.outcome import Outcome, describe, outcome_of, words
from runs.models import Run
from runs.persistence.store import load_state
from runs.project_queue import Place, places


def status_of(run: Run) -> str:
    """The run's status as told: ``queued`` until admitted, else the row's."""
    return "queued" if run.queued and run.status == Run.Status.RUNNING else str(run.status)


def code_of(run: Run) -> str:
    """The outcome's machine name without reading the state (for lists)."""
    return "queued" if status_of(run) == "queued" else str(run.outcome)


def label_of(run: Run) -> str:
    return words(code_of(run))


def queue_words(run: Run, place: Place | None) -> str:
    """Where a queued run stands: "#2 in payments"."""
    slug = run.project.slug if run.project_id is not None else "its project"
    return f"#{place.position} in {slug}" if place is not None else f"in {slug}"


def told(run: Run, place: Place | None = None) -> Outcome:
    """The outcome in words, with its limitations (``place``: the queue place, if the
    caller has looked it up already)."""
    if status_of(run) == "queued":
        where = queue_words(run, place or places([run]).get(str(run.pk)))
        return describe("queued", None, "", unmet=[], applied=False, queued=where)
    return outcome_of(load_state(run))
