"""The global kill switch: stop all runs, admit no new runs; operators only."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User

from core.errors import InputError
from runs.approval_flow.gate import DjangoApprovals
from runs.control import ControlRefused, Watchdog, kill, set_global
from runs.models import Event, GlobalSwitch, Run
from runs.runtime import create_run
from runs.services import drive_run
from tests.helpers import World
from tests.runs_waiting import DEMO_CONTRACT, SCRIPTED_DEMO

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.postgres]


def waiting(world: World) -> Run:
    run = world.create()
    state = drive_run(run, world.environment(), DjangoApprovals(run))
    assert state.status == "waiting_approval"
    return run


def test_it_stops_every_active_run_and_records_who(operator: User, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("runs.control.enqueue_resume", lambda run_id: None)
    worlds = [World(), World()]
    runs = [waiting(w) for w in worlds]
    assert set_global(operator, stop_all=True, admit_new=True) == 2
    for world, run in zip(worlds, runs, strict=True):
        run.refresh_from_db()
        with Watchdog(str(run.pk), renew=lambda: True, on_kill=lambda: None, poll=0.1, renew_every=10) as watchdog:
            state = drive_run(run, world.environment(), DjangoApprovals(run), controls=watchdog)
        assert state.outcome == "killed"
        event = Event.objects.get(run=run, type="kill_requested")
        assert event.payload == {"by": operator.username, "scope": "global", "reason": "", "via": ""}


def test_it_admits_no_new_runs_when_told(operator: User) -> None:
    set_global(operator, stop_all=False, admit_new=False)
    with pytest.raises(InputError, match="admits no new runs"):
        create_run(DEMO_CONTRACT, SCRIPTED_DEMO, operator)
    set_global(operator, stop_all=False, admit_new=True)
    assert GlobalSwitch.get().admit_new


def test_it_refuses_the_switches_to_anyone_but_operators(reviewer: User, outsider: User) -> None:
    run = World().create()
    for user in (reviewer, outsider):
        with pytest.raises(ControlRefused):
            kill(run, user)
        with pytest.raises(ControlRefused):
            set_global(user, stop_all=True, admit_new=False)
    assert not GlobalSwitch.get().stop_all
