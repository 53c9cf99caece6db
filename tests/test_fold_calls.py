"""The calls are on the record (core.fold_calls): every change to a call's record, the
operations, the call in progress, the calls not performed and the feedback comes
with an event, so folding a run's log gives its whole state, and a change that no
event explains fails the checkpoint that would store it (core.simulated.MemoryStore
checks after every one)."""

from __future__ import annotations

from dataclasses import replace
from typing import cast

import pytest

from core import events as ev
from core import feedback as fb
from core.call_record import CallRecord
from core.context import RunContext
from core.decisions import Blocked, Duplicate, Proceed
from core.faults import Fault
from core.fold import NOT_EXPLAINED, StateNotExplained, differences, fold
from core.loop import GATES
from core.scenarios import FIXED, build_rig, call
from core.tools import ToolSpec


def test_it_fails_the_checkpoint_after_a_change_no_event_explains() -> None:
    def known_effects_that_scribble(run: RunContext, record: CallRecord, spec: ToolSpec) -> Proceed | Duplicate | Blocked:
        run.state.not_performed.append({"call_id": record.call_id, "tool": record.tool, "state": "made up"})
        return GATES.known_effects(run, record, spec)

    rig = build_rig([call("read_file", path="src/calc.py")], gates=replace(GATES, known_effects=known_effects_that_scribble))
    with pytest.raises(StateNotExplained, match="not_performed: the state says"):
        rig.harness.run()


def test_it_folds_every_part_of_a_run_with_refusals_retries_and_settled_calls() -> None:
    rig = build_rig(
        [
            call("read_file"),  # refused: no path
            call("read_file", path="src/calc.py"),  # two transient failures first
            call("publish", message="too early"),  # check required
            call("write_file", path="src/calc.py", content=FIXED),
            call("run_check", check_id="tests"),
            call("finish", summary="done"),
        ],
        faults=[Fault("read_file", "transient", 2)],
    )
    state = rig.harness.run()
    assert state.outcome == "complete"
    log = cast(list[ev.AnyEvent], rig.store.events)
    folded = fold(log, state)
    assert differences(state, log) == []
    assert {"proposer_state"} == NOT_EXPLAINED
    # The next proposal cleared each settled call; the refused publish left its line.
    assert folded.not_performed == [{"call_id": "c3", "tool": "publish", "state": "failed", "reason": "check_required"}]
    assert sorted(folded.ledger) == ["c6"] and folded.ledger["c6"].state == "completed"
    assert folded.feedback == {"kind": "complete", "call_id": "c6"}
    assert (folded.current_call, folded.current_proposal) == (None, None)


def test_it_tells_the_model_about_earlier_attempts_from_the_retries_on_the_record() -> None:
    rig = build_rig([call("read_file", path="src/calc.py")], faults=[Fault("read_file", "transient", 2)])
    rig.harness.run()
    retries = [e for e in rig.store.events if isinstance(e, ev.Retry)]
    assert [e.transient_reason for e in retries] == ["transient failure", "transient failure"]
    results = [f for f in rig.feedbacks if isinstance(f, fb.Result)]
    assert [r.earlier_attempts for r in results] == [["transient failure", "transient failure"]]
