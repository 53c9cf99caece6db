"""The event log explains the stored state: folding a run's events gives the parts
of its state they determine (core.fold), for real runs through the real
store, and ``manage.py check_run_state`` reports any difference."""

from __future__ import annotations

import pytest

from core import events as ev
from core.environment import Environment
from core.faults import Fault, FaultyExecutor
from core.fences import RowLock
from core.fold import fold
from core.simulated import MemoryApprovals
from core.state import RunState
from runs.models import Event, Run
from runs.persistence.eventlog import append_event
from runs.persistence.statecheck import state_problems
from runs.persistence.store import load_state
from runs.services import drive_run
from tests.helpers import KillFlag, World, run_command
from tests.test_durable_state import create, drive, finish

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.postgres]


def folded(run: Run) -> RunState:
    return fold((row.typed() for row in Event.objects.filter(run=run).order_by("seq")), load_state(run))


def assert_explained(run: Run) -> None:
    run.refresh_from_db()
    assert state_problems(run) == []


def test_it_explains_a_complete_run() -> None:
    world = World()
    run = create(world)
    assert finish(run, world).outcome == "complete"
    assert_explained(run)
    facts = folded(run)
    assert (facts.status, facts.proposals, facts.calls) == ("complete", 5, 4)
    assert [(e.check_id, e.passed) for e in facts.evidence] == [("tests", True)] and facts.current_evidence == {"tests": 0}


def test_it_explains_a_waiting_run_and_its_wait() -> None:
    world = World()
    run = create(world)
    state = drive(run, world)
    assert state.status == "waiting_approval"
    assert_explained(run)
    assert folded(run).waiting == state.waiting


def test_it_explains_a_run_denied_by_its_reviewer() -> None:
    world = World()
    run = create(world)
    state = drive(run, world)
    assert state.waiting is not None
    world.approvals.deny(state.waiting.approval_key, "not this change")
    assert drive(run, world).outcome == "denied"
    assert_explained(run)
    facts = folded(run)
    assert (facts.status, facts.stop_reason, facts.waiting) == ("stopped", "denied", None)


def test_it_explains_a_run_killed_while_it_waited() -> None:
    world = World()
    run = create(world)
    drive(run, world)
    Run.objects.filter(pk=run.pk).update(kill_requested=True)
    append_event(str(run.pk), ev.KillRequested, fence=RowLock("a test's kill"), by="otto", scope="run")
    assert_explained(run)  # flagged, not yet stopped: still waiting
    run.refresh_from_db()
    state = drive_run(run, world.environment(), world.approvals, controls=KillFlag(str(run.pk)))
    assert state.outcome == "killed"
    assert_explained(run)


def test_it_explains_a_run_with_a_pending_effect() -> None:
    world = World()
    world.approvals = MemoryApprovals()
    run = world.create()
    faulty = FaultyExecutor(world.executor, [Fault("write_file", "unknown", 1)], world.workspace.revision, lambda tool: tool != "read_file")
    state = drive_run(run, Environment(faulty, world.workspace), world.approvals)
    assert state.pending_effects, state.outcome
    assert_explained(run)
    assert [(p.call_id, p.tool, p.kind) for p in folded(run).pending_effects] == [("c2", "write_file", "workspace")]


def test_it_explains_a_wait_that_goes_on_and_a_workspace_changed_behind_the_run() -> None:
    world = World()
    run = create(world)
    first = drive(run, world)
    assert first.waiting_since is not None
    again = drive(run, world)  # nobody decided: the wait goes on, its clock running since it began
    assert (again.status, again.waiting_since, again.waited_seconds) == ("waiting_approval", first.waiting_since, 0.0)
    assert_explained(run)
    world.workspace.files["src/notes.txt"] = "edited behind the run"
    state = drive(run, world)
    assert state.revision != first.revision and state.waited_seconds > 0
    assert_explained(run)
    moved = [row.typed() for row in Event.objects.filter(run=run, type="workspace_changed")]
    assert [(e.old_revision, e.revision) for e in moved if isinstance(e, ev.WorkspaceChanged)] == [(first.revision, state.revision)]
    assert folded(run).revision == state.revision


def test_it_reports_each_difference_and_exits_non_zero() -> None:
    world = World()
    run = create(world)
    finish(run, world)
    other = create(world)
    drive(other, world)
    assert run_command("check_run_state", "--all")[:2] == (0, "2 run(s) checked, 0 inconsistent\n")
    stored = Run.objects.get(pk=run.pk).state
    Run.objects.filter(pk=run.pk).update(state={**stored, "proposals": 9, "stop_reason": "killed"})
    code, out, _ = run_command("check_run_state", str(run.pk))
    assert code == 1
    assert f"run {run.pk}: stop_reason: the state says 'killed', the events say None" in out
    assert f"run {run.pk}: proposals: the state says 9, the events say 5" in out
    assert out.endswith("1 run(s) checked, 1 inconsistent\n")
    assert run_command("check_run_state", "--all")[0] == 1
    assert run_command("check_run_state", str(other.pk))[0] == 0


def test_it_reports_an_event_or_a_state_that_does_not_read() -> None:
    world = World()
    run = create(world)
    drive(run, world)
    Event.objects.filter(run=run, type="proposed", seq=2).update(payload={"number": "two"})
    code, out, _ = run_command("check_run_state", str(run.pk))
    assert code == 1 and "event 2 (proposed) does not read as its type" in out
    Run.objects.filter(pk=run.pk).update(state={**load_state(run).model_dump(mode="json"), "schema_version": 99})
    code, out, _ = run_command("check_run_state", str(run.pk))
    assert code == 1 and "the stored state does not load" in out and "schema version 99" in out


def test_it_refuses_a_run_it_cannot_find_or_no_run_named() -> None:
    assert run_command("check_run_state", "not-a-run")[0] == 2
    assert run_command("check_run_state", "00000000-0000-0000-0000-000000000009")[0] == 2
    code, _, err = run_command("check_run_state")
    assert code == 2 and "one run id or --all" in err
