"""The stored run state is versioned: a state of an earlier shape is upgraded step
by step on load, and one written by a newer release is refused, not mangled."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from runs.core.state import SCHEMA_VERSION, UPGRADES, RunState, StateVersionError, load_stored_state
from runs.models import Run
from runs.store import load_state
from tests.helpers import World
from tests.test_durable_state import create, drive, finish

# A waiting run's state as version 1 stored it, frozen: it must keep loading, so a
# change to RunState's shape comes with its upgrade step.
V1 = json.loads((Path(__file__).parent / "data" / "run_state_v1.json").read_text())


def test_it_upgrades_a_state_of_the_first_shape_to_the_current_one():
    assert "schema_version" not in V1
    state = load_stored_state(V1)
    assert state.schema_version == SCHEMA_VERSION
    assert state.status == "waiting_approval" and state.waiting is not None and state.waiting.call_id == "c4"
    assert {k: v for k, v in state.model_dump(mode="json").items() if k != "schema_version"} == V1


def test_it_has_one_upgrade_step_per_earlier_version_each_to_the_next():
    assert sorted(UPGRADES) == list(range(1, SCHEMA_VERSION))
    for version, step in UPGRADES.items():
        assert step({"schema_version": version})["schema_version"] == version + 1


def test_it_writes_new_states_at_the_current_version():
    assert RunState.model_fields["schema_version"].default == SCHEMA_VERSION


def test_it_refuses_a_state_from_a_newer_release_saying_so():
    newer = {**V1, "schema_version": SCHEMA_VERSION + 1}
    with pytest.raises(
        StateVersionError, match=rf"schema version {SCHEMA_VERSION + 1}, newer than this release reads \({SCHEMA_VERSION}\)"
    ):
        load_stored_state(newer)
    assert newer["schema_version"] == SCHEMA_VERSION + 1  # nothing was changed


@pytest.mark.parametrize("version", [0, -1, "2", True, None])
def test_it_refuses_a_version_that_never_existed(version):
    with pytest.raises(StateVersionError, match="is not a version"):
        load_stored_state({**V1, "schema_version": version})


@pytest.mark.django_db(transaction=True)
@pytest.mark.postgres
def test_it_resumes_a_run_stored_in_the_first_shape_and_stores_the_current_one():
    world = World()
    run = create(world)
    waiting = drive(run, world)
    assert waiting.status == "waiting_approval"
    stored = Run.objects.get(pk=run.pk).state
    assert stored["schema_version"] == SCHEMA_VERSION
    Run.objects.filter(pk=run.pk).update(state={k: v for k, v in stored.items() if k != "schema_version"})
    assert load_state(Run.objects.get(pk=run.pk)) == waiting
    assert finish(run, world).outcome == "complete"
    assert Run.objects.get(pk=run.pk).state["schema_version"] == SCHEMA_VERSION
