"""Whether a stored run state is the one its event log explains
(core.fold): ``manage.py check_run_state`` and the tests use it."""

from __future__ import annotations

from pydantic import ValidationError

from core.events import AnyEvent
from core.fold import differences
from core.state import StateVersionError
from runs.models import Event, Run
from runs.persistence.store import load_state


def state_problems(run: Run) -> list[str]:
    """What is wrong with the run's stored state against its log, one line each;
    empty when the log explains it. A state or an event that cannot be read is a
    problem too, named as such."""
    try:
        state = load_state(run)
    except (StateVersionError, ValidationError) as exc:
        return [f"the stored state does not load: {exc}"]
    events: list[AnyEvent] = []
    problems = []
    for row in Event.objects.filter(run=run).order_by("seq").iterator():
        try:
            events.append(row.typed())
        except ValidationError as exc:
            problems.append(f"event {row.seq} ({row.type}) does not read as its type: {exc.errors()[0]['msg']}")
    return problems + [str(d) for d in differences(state, events)]
