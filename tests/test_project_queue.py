"""A project's cap and queue (runs.project_queue): runs beyond ``max_active_runs`` wait,
first in first out, visible with their place and why; a slot is claimed with a
conditional UPDATE and given back with the run's end; a run killed while queued stops
unstarted. The same with real workers: tests/test_project_queue_workers.py."""

from __future__ import annotations

import threading
import time

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.test import Client
from django.urls import reverse

from core import events as ev
from core.fences import RowLock
from core.fold import apply
from projects.models import Project
from runs import project_queue as admission
from runs.control import kill
from runs.models import Run
from runs.persistence.store import DjangoStore, load_state
from runs.runtime import advance, create_run
from tests.test_api import SCRIPT, SMALL_CONTRACT

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.postgres]


@pytest.fixture
def capped(other_project: Project, other_member: User) -> Project:
    other_project.max_active_runs = 2
    other_project.save()
    return other_project


def start(user: User, n: int = 1) -> list[Run]:
    return [create_run({**SMALL_CONTRACT, "task_id": f"q{len(Run.objects.all())}"}, SCRIPT, user, enqueue=False) for _ in range(n)]


def end(run: Run) -> None:
    """The run's final checkpoint, as its driver writes it."""
    state = load_state(run)
    stop = ev.Stopped(run_id=str(run.pk), seq=0, ts=time.time(), status="killed", message="ended by the test")
    apply(state, stop)
    DjangoStore(RowLock("the test's end of the run")).checkpoint(state, [stop])


def queue(project: Project) -> list[str]:
    return admission.queue_of(project.pk)


def test_it_queues_runs_beyond_the_cap_first_in_first_out_and_starts_them_as_slots_free(capped: Project, other_member: User) -> None:
    runs = start(other_member, 5)
    assert [r.holds_slot for r in runs] == [True, True, False, False, False]
    assert queue(capped) == [str(r.pk) for r in runs[2:]]
    capped.refresh_from_db()
    assert capped.active_runs == 2
    places = admission.places(runs)
    assert [places[str(r.pk)].position for r in runs[2:]] == [1, 2, 3]
    assert "at most 2 at once (2 active)" in places[str(runs[2].pk)].reason
    assert admission.dispatch(capped.pk) == [], "no slot is free"
    queued_at = load_state(runs[2]).started_at
    end(runs[0])
    capped.refresh_from_db()
    assert capped.active_runs == 1
    end(runs[0])  # written again: the slot goes back once
    capped.refresh_from_db()
    assert capped.active_runs == 1
    assert admission.dispatch(capped.pk) == [str(runs[2].pk)]
    assert queue(capped) == [str(r.pk) for r in runs[3:]]
    runs[2].refresh_from_db()
    assert load_state(runs[2]).started_at > queued_at, "time in the queue is not working time"
    end(runs[1])
    end(runs[2])
    assert admission.dispatch(capped.pk) == [str(runs[3].pk), str(runs[4].pk)]
    capped.refresh_from_db()
    assert capped.active_runs == 2 and queue(capped) == []


def test_it_queues_a_new_run_behind_those_waiting_even_when_a_slot_is_free(capped: Project, other_member: User) -> None:
    first, second, third = start(other_member, 3)
    end(first)
    fourth = start(other_member)[0]
    assert fourth.queued, "the queue is first in first out"
    assert admission.dispatch(capped.pk) == [str(third.pk)]


def test_it_stops_a_run_killed_while_queued_without_starting_it(capped: Project, other_member: User) -> None:
    runs = start(other_member, 4)
    assert kill(runs[2], other_member, "not needed")
    assert advance(str(runs[2].pk)) == "killed"
    runs[2].refresh_from_db()
    assert runs[2].outcome == "killed" and not runs[2].queued and not runs[2].holds_slot
    assert queue(capped) == [str(runs[3].pk)]
    assert advance(str(runs[3].pk)) == "queued", "a queued run is not driven"
    capped.refresh_from_db()
    assert capped.active_runs == 2


def test_it_shows_queued_runs_in_the_list_and_the_api_with_their_place_and_why(capped: Project, other_member: User) -> None:
    runs = start(other_member, 4)
    client = Client()
    client.force_login(other_member)
    page = client.get(reverse("runs:list")).content.decode()
    assert page.count("queued · #") == 2 and 'data-queued="1"' in page and 'data-queued="2"' in page
    assert "runs at most 2 at once" in page
    capped.paused = True
    capped.save()
    assert "elsewhere is paused" in client.get(reverse("runs:list")).content.decode()
    client.force_login(other_member)
    body = client.get(f"/api/runs/{runs[3].pk}/").json()
    assert body["queue"]["position"] == 2 and "paused" in body["queue"]["reason"]
    assert client.get(f"/api/runs/{runs[0].pk}/").json()["queue"] is None
    detail = client.get(reverse("runs:detail", args=[runs[2].pk])).content.decode()
    assert "Queued, #1 in project elsewhere" in detail and "paused" in detail
    assert 'id="queue-place"' not in client.get(reverse("runs:detail", args=[runs[0].pk])).content.decode()


def test_it_never_admits_more_than_the_cap_when_dispatchers_race(capped: Project, other_member: User) -> None:
    capped.max_active_runs = 3
    capped.save()
    runs = start(other_member, 12)
    for run in runs[:3]:
        end(run)
    admitted: list[str] = []
    failures: list[BaseException] = []
    barrier = threading.Barrier(6)

    def dispatcher() -> None:
        try:
            barrier.wait()
            admitted.extend(admission.dispatch(capped.pk))
        except BaseException as exc:
            failures.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=dispatcher) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []
    assert sorted(admitted) == sorted(str(r.pk) for r in runs[3:6]), "the three oldest, each once"
    assert Run.objects.filter(project=capped, holds_slot=True).count() == 3
    capped.refresh_from_db()
    assert capped.active_runs == 3


def test_it_counts_a_slot_for_every_admitted_run_so_a_cap_set_later_holds(other_project: Project, other_member: User) -> None:
    early = start(other_member, 3)
    assert all(r.holds_slot for r in early)
    other_project.max_active_runs = 2
    other_project.save()
    later = start(other_member)[0]
    assert later.queued
    end(early[0])
    assert admission.dispatch(other_project.pk) == [], "3 active went down to 2: still the cap"
    end(early[1])
    assert admission.dispatch(other_project.pk) == [str(later.pk)]
