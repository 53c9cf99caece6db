"""Counter semantics and the deadline checks (docs/design.md, Counters)."""

from __future__ import annotations

from core.faults import Fault
from core.feedback import Feedback
from core.ports import Call
from core.scenarios import FIXED, Rig, build_rig, call, demo_contract


def test_it_counts_invalid_proposals_and_finish_as_proposals() -> None:
    rig = build_rig([call("read_file"), call("finish", summary="x"), call("read_file", path="src/calc.py")])
    rig.harness.run()
    assert rig.state.proposals == 3
    assert rig.state.calls == 1


def test_it_counts_every_retry_as_a_call_but_one_proposal() -> None:
    rig = build_rig([call("read_file", path="src/calc.py")], faults=[Fault("read_file", "transient", 2)])
    rig.harness.run()
    assert rig.state.proposals == 1 and rig.state.calls == 3


def test_it_stops_when_the_call_budget_is_used_even_mid_retry() -> None:
    rig = build_rig(
        [call("read_file", path="src/calc.py")],
        faults=[Fault("read_file", "transient", 5)],
        contract=demo_contract(max_tool_calls=2, max_attempts=5),
    )
    rig.harness.run()
    assert rig.state.outcome == "budget_exhausted" and rig.state.calls == 2


def test_it_never_grants_more_than_policy_allows() -> None:
    from core.scenarios import demo_policy

    contract = demo_contract(max_proposals=10_000, wall_time_seconds=99_999)
    rig = build_rig([], contract=contract)
    assert rig.state.limits.max_proposals == demo_policy().budget.max_proposals
    assert rig.state.limits.wall_time_seconds == 600
    rig.harness.run()
    started = rig.store.events[0].model_dump()
    assert started["clipped"]["max_proposals"] == {"asked": 10_000, "allowed": 50}


def _past_deadline(rig: Rig) -> None:
    rig.clock.t = rig.state.deadline + 1


def test_it_checks_the_deadline_before_asking_the_model() -> None:
    rig = build_rig([call("read_file", path="src/calc.py")])
    _past_deadline(rig)
    rig.harness.run()
    assert rig.state.outcome == "deadline" and rig.state.proposals == 0
    assert "before asking the model" in rig.state.stop_message


def test_it_checks_the_deadline_after_a_proposal_arrives() -> None:
    rig = build_rig([])

    def slow_model(feedback: Feedback | None, position: int) -> object | None:
        _past_deadline(rig)
        return call("read_file", path="src/calc.py")

    from core.scripted import ScriptedProposer

    rig.harness.context.proposer = ScriptedProposer(slow_model)
    rig.harness.run()
    assert rig.state.outcome == "deadline" and rig.state.proposals == 1 and rig.state.calls == 0
    assert "after the proposal arrived" in rig.state.stop_message


def test_it_checks_the_deadline_after_each_receipt() -> None:
    rig = build_rig([call("write_file", path="src/calc.py", content=FIXED), call("finish")])
    inner = rig.harness.context.executor.execute

    def slow_execute(c: Call) -> object:
        receipt = inner(c)
        _past_deadline(rig)
        return receipt

    rig.harness.context.executor.execute = slow_execute  # type: ignore[method-assign, assignment]  # this instance's only; mypy keeps a protocol method's self
    rig.harness.run()
    assert rig.state.outcome == "deadline" and "once the call had run and its receipt was recorded" in rig.state.stop_message
    # The write's receipt was still recorded before stopping.
    assert rig.store.ledger["c1"].state == "completed"


def test_it_checks_the_deadline_before_each_attempt() -> None:
    rig = build_rig([call("read_file", path="src/calc.py")], faults=[Fault("read_file", "transient", 1)])
    rig.harness.context.config = type(rig.harness.context.config)(retry_base_seconds=0.0)
    original_sleep = rig.clock.sleep

    def sleep_past(seconds: float) -> None:
        original_sleep(seconds)
        _past_deadline(rig)

    rig.clock.sleep = sleep_past  # type: ignore[method-assign]  # this instance's only
    rig.harness.run()
    assert rig.state.outcome == "deadline" and "before an attempt" in rig.state.stop_message
    assert rig.state.calls == 1


def test_it_stops_instead_of_sleeping_when_a_retry_backoff_would_cross_the_deadline() -> None:
    rig = build_rig([call("read_file", path="src/calc.py")], faults=[Fault("read_file", "transient", 1)])
    rig.clock.t = rig.state.deadline - 0.25  # less than the 0.5 s first backoff
    rig.harness.run()
    assert rig.state.outcome == "deadline" and "backoff would cross the deadline" in rig.state.stop_message
    assert rig.clock.slept == []


def test_it_says_the_kill_switch_stopped_the_run_once_the_call_had_run() -> None:
    rig = build_rig([call("write_file", path="src/calc.py", content=FIXED), call("finish")])
    inner = rig.harness.context.executor.execute
    killed: list[bool] = []

    class Switch:
        def kill_requested(self) -> bool:
            return bool(killed)

    def execute_then_kill(c: Call) -> object:
        receipt = inner(c)
        killed.append(True)
        return receipt

    rig.harness.context.controls = Switch()
    rig.harness.context.executor.execute = execute_then_kill  # type: ignore[method-assign, assignment]  # this instance's only
    rig.harness.run()
    assert rig.state.outcome == "killed"
    assert rig.state.stop_message == "stopped by the kill switch once the call had run and its receipt was recorded"
    assert "(" not in rig.state.stop_message


def test_it_says_a_blocked_call_when_the_proposer_ends_after_a_check_refused_it() -> None:
    rig = build_rig([call("write_file", path="src/calc.py", content=FIXED), call("publish", message="ship it")])
    rig.harness.run()
    assert rig.state.outcome == "proposals_exhausted"
    assert rig.state.stop_message.startswith("the proposer has no further proposals; its last call was blocked: it needs ")
    assert "to pass on revision" in rig.state.stop_message
