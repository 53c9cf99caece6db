"""The trial's reviewer hears of its runs' requests from the event log, as the
notifications do: an ``approval_required`` of a trial's run whose variant a rule or a
script reviews is handed to a task once it commits; a run's ``stopped`` has its trial
looked at (done once all its runs have ended). Runs send the signal for every event
and know nothing of trials.

An outside agent's run keeps its worker process while a reviewer decides (the agent is
a process of that worker's: docs/design.md, Agents, its lifetime). A task could then wait
for a slot that only the waiting runs hold: with as many agent runs waiting as the
workers have processes, no process is left to run ``trials.review`` and the trial
would never end. So the rule or script decides such a run's request in the process
that drives it, right after the checkpoint that filed the request commits (the run
then waits on it), through the same approval functions; the task remains for a
request the run is not yet waiting on and for every other run."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from functools import partial
from typing import Any

from django.db import transaction
from django.dispatch import receiver

from core import events as ev
from runs.models import Event
from runs.persistence.signals import events_stored

log = logging.getLogger(__name__)


# Whether a trial acts on the events of a type, found once per type: an isinstance
# against a pydantic model's class goes through ABCMeta's check, two for each event of
# every step.
_ACTED_ON: dict[type[ev.Event], bool] = {}


@receiver(events_stored, sender=Event, dispatch_uid="trials.on_events")
def on_events(sender: type[Event], rows: Sequence[Event], events: list[ev.AnyEvent], **_: Any) -> None:
    for typed in events:
        acted_on = _ACTED_ON.get(type(typed))
        if acted_on is None:
            acted_on = _ACTED_ON[type(typed)] = isinstance(typed, ev.ApprovalRequired | ev.Stopped)
        if not acted_on:
            continue
        from trials.models import Repetition

        repetition = Repetition.objects.filter(run_id=typed.run_id).values_list("variant__trial_id", "variant__reviewer").first()
        if repetition is None:
            continue
        trial_id, reviewer = repetition
        if isinstance(typed, ev.ApprovalRequired):
            if (reviewer or {}).get("kind") != "people":
                transaction.on_commit(partial(_review, typed.request_id, typed.run_id))
        else:
            transaction.on_commit(partial(_enqueue_tend, int(trial_id)))


def _review(request_id: str, run_id: str) -> None:
    """Decide here when the run's worker is kept while it waits (an agent's), else hand
    it to the task. Never raises: the driver's checkpoint has committed already, and a
    request left undecided is the task's (and the command's loop's) to decide."""
    from runs.models import Run
    from runs.runtime import starts_an_agent
    from trials.service import review

    try:
        run = Run.objects.only("proposer").filter(pk=run_id).first()
        if run is not None and starts_an_agent(run) and review(request_id) != "later":
            return
    except Exception:
        log.exception("could not decide request %s in its run's worker; the task will", request_id)
    _enqueue_review(request_id)


def _enqueue_review(request_id: str) -> None:
    from trials import tasks

    try:
        tasks.review.delay(request_id)
    except Exception:  # the command's loop and the page's reading catch up with what is missed
        log.exception("could not enqueue the review of request %s", request_id)


def _enqueue_tend(trial_id: int) -> None:
    from trials import tasks

    try:
        tasks.tend_trial.delay(trial_id)
    except Exception:
        log.exception("could not enqueue a look at trial %s", trial_id)
