"""The stored run state is versioned: a state of an earlier shape is upgraded step
by step on load, and one written by a newer release is refused, not mangled."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from core.state import SCHEMA_VERSION, UPGRADES, RunState, StateVersionError, load_stored_state
from runs.models import Event, Run
from runs.persistence.statecheck import state_problems
from runs.persistence.store import load_state
from tests.helpers import World
from tests.test_durable_state import create, drive, finish

# A waiting run's state as version 1 stored it, frozen: it must keep loading, so a
# change to RunState's shape comes with its upgrade step.
V1 = json.loads((Path(__file__).parent / "data" / "run_state_v1.json").read_text())
# Version 2 was version 1 with its number.
V2 = {**V1, "schema_version": 2}
# What version 3 changed: ``next_seq`` (the store numbers events) gave way to ``run_started``.
CHANGED_IN_3 = {"schema_version", "next_seq", "run_started"}


def without_4(dumped: dict[str, Any]) -> dict[str, Any]:
    """A current state without what versions 4 to 7 added: ``proposed_at``, each call
    record's fixed ``effect``, ``changes_requested``, each evidence record's
    ``egress`` and ``unmet`` (none before them)."""
    assert dumped["proposed_at"] is None and all(r["effect"] is None for r in dumped["ledger"].values())
    assert dumped["changes_requested"] == {}
    assert dumped["evidence"] and all(e["egress"] == [] for e in dumped["evidence"])
    ledger = {c: {k: v for k, v in r.items() if k != "effect"} for c, r in dumped["ledger"].items()}
    evidence = [{k: v for k, v in e.items() if k != "egress"} for e in dumped["evidence"]]
    assert dumped["unmet"] == []
    kept = {k: v for k, v in dumped.items() if k not in ("proposed_at", "changes_requested", "unmet")}
    return {**kept, "ledger": ledger, "evidence": evidence}


def test_it_upgrades_a_state_of_the_first_shape_to_the_current_one() -> None:
    assert "schema_version" not in V1
    state = load_stored_state(V1)
    assert state.schema_version == SCHEMA_VERSION
    assert state.status == "waiting_approval" and state.waiting is not None and state.waiting.call_id == "c4"
    assert state.run_started
    unchanged = {k: v for k, v in V1.items() if k not in CHANGED_IN_3}
    assert {k: v for k, v in without_4(state.model_dump(mode="json")).items() if k not in CHANGED_IN_3} == unchanged


def test_it_upgrades_a_version_2_state_dropping_next_seq_for_whether_the_run_started() -> None:
    assert V2["next_seq"] == 17
    state = load_stored_state(V2)
    assert state.schema_version == SCHEMA_VERSION and state.run_started
    assert "next_seq" not in state.model_dump() and V2["next_seq"] == 17  # the stored object is not changed
    # A run created and never driven had written no event yet: it starts when driven.
    assert not load_stored_state({**V2, "next_seq": 1}).run_started


def test_it_has_one_upgrade_step_per_earlier_version_each_to_the_next() -> None:
    assert sorted(UPGRADES) == list(range(1, SCHEMA_VERSION))
    for version, step in UPGRADES.items():
        assert step({"schema_version": version})["schema_version"] == version + 1


def test_it_writes_new_states_at_the_current_version() -> None:
    assert RunState.model_fields["schema_version"].default == SCHEMA_VERSION


def test_it_refuses_a_state_from_a_newer_release_saying_so() -> None:
    newer = {**V1, "schema_version": SCHEMA_VERSION + 1}
    with pytest.raises(
        StateVersionError, match=rf"schema version {SCHEMA_VERSION + 1}, newer than this release reads \({SCHEMA_VERSION}\)"
    ):
        load_stored_state(newer)
    assert newer["schema_version"] == SCHEMA_VERSION + 1  # nothing was changed


@pytest.mark.parametrize("version", [0, -1, "2", True, None])
def test_it_refuses_a_version_that_never_existed(version: object) -> None:
    with pytest.raises(StateVersionError, match="is not a version"):
        load_stored_state({**V1, "schema_version": version})


def stored_as(state: dict[str, Any], version: int, next_seq: int) -> dict[str, Any]:
    """A current stored state in the shape an earlier version wrote it."""
    earlier = {k: v for k, v in state.items() if k not in ("schema_version", "run_started")} | {"next_seq": next_seq}
    return earlier if version == 1 else {**earlier, "schema_version": version}


@pytest.mark.django_db(transaction=True)
@pytest.mark.postgres
@pytest.mark.parametrize("version", [1, 2])
def test_it_resumes_a_run_stored_at_an_earlier_version_without_starting_it_again(version: int) -> None:
    world = World()
    run = create(world)
    waiting = drive(run, world)
    assert waiting.status == "waiting_approval"
    stored = Run.objects.get(pk=run.pk).state
    assert stored["schema_version"] == SCHEMA_VERSION
    earlier = stored_as(stored, version, next_seq=Event.objects.filter(run=run).count() + 1)
    Run.objects.filter(pk=run.pk).update(state=earlier)
    assert load_state(Run.objects.get(pk=run.pk)) == waiting
    assert finish(run, world).outcome == "complete"
    assert Event.objects.filter(run=run, type="run_started").count() == 1
    run.refresh_from_db()
    assert run.state["schema_version"] == SCHEMA_VERSION and "next_seq" not in run.state
    assert state_problems(run) == []
