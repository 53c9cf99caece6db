"""The controls self-test, and one ablation per control: with that control switched off (the
gate set handed to the loop has its function replaced), the failure it prevents gets
through (so each control is load-bearing)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import replace

import pytest

from core import scenarios
from core.call_record import CallRecord
from core.context import RunContext
from core.decisions import Accepted, Authorized, Proceed
from core.gates import Gates
from core.loop import GATES
from core.policy import Authorization
from core.receipts import Receipt
from core.state import RunState
from core.tools import ToolSpec


def allow_everything(run: RunContext, record: CallRecord, spec: ToolSpec) -> Authorized:
    return Authorized(Authorization("allow", "ablated", False))


def arguments_as_given(run: RunContext, accepted: Accepted) -> Accepted:
    return accepted


def no_effects_known(run: RunContext, record: CallRecord, spec: ToolSpec) -> Proceed:
    return Proceed()


def no_evidence_needed(run: RunContext, record: CallRecord, spec: ToolSpec, authorization: Authorization | None) -> Proceed:
    return Proceed()


def receipt_as_given(raw: object, record: CallRecord, spec: ToolSpec, harness_revision: str) -> Receipt:
    assert isinstance(raw, dict)
    return Receipt.model_validate({**raw, "call_id": record.call_id})


def any_number_of_proposals(state: RunState) -> bool:
    return True


def fifty_attempts(state: RunState, record: CallRecord) -> bool:
    return record.attempts < 50


def no_infrastructure_failure(receipt: Receipt) -> str | None:
    return None


# Each scenario, and the gate set with the control it shows switched off.
ABLATIONS: list[tuple[Callable[[Gates], tuple[bool, str]], Gates]] = [
    (scenarios.denied_tool, replace(GATES, authorize=allow_everything)),
    (scenarios.stale_check, replace(GATES, evidence=no_evidence_needed)),
    (scenarios.exhausted_budget, replace(GATES, proposals_left=any_number_of_proposals)),
    (scenarios.inconsistent_receipt, replace(GATES, receipt=receipt_as_given)),
    (scenarios.unknown_write, replace(GATES, known_effects=no_effects_known)),
    (scenarios.transient_retry, replace(GATES, attempts_left=fifty_attempts)),
    (scenarios.invalid_argument, replace(GATES, validate=arguments_as_given)),
    (scenarios.failing_sandbox, replace(GATES, infrastructure_failure=no_infrastructure_failure)),
    (scenarios.repeated_effect, replace(GATES, known_effects=no_effects_known)),
]


def switched_off(gates: Gates) -> str:
    """The gate ``gates`` replaces in the real set, by the name of its field."""
    return next(name for name in vars(GATES) if getattr(gates, name) is not getattr(GATES, name))


def test_it_holds_every_control_with_the_real_core() -> None:
    results = scenarios.run_scenarios()
    assert [ok for _, ok, _ in results] == [True] * len(scenarios.SCENARIOS), results


def test_it_covers_each_scenario_with_an_ablation() -> None:
    assert {s.run for s in scenarios.SCENARIOS} == {scenario for scenario, _ in ABLATIONS}


@pytest.mark.parametrize(("scenario", "ablated"), ABLATIONS, ids=[f"{s.__name__}-without-{switched_off(g)}" for s, g in ABLATIONS])
def test_it_lets_the_failure_through_when_the_control_is_removed(scenario: Callable[[Gates], tuple[bool, str]], ablated: Gates) -> None:
    ok, detail = scenario(ablated)
    assert not ok, f"without {switched_off(ablated)}, {scenario.__name__} still holds: {detail}"


def test_it_exits_zero_from_the_selftest_command_and_prints_a_row_per_control() -> None:
    env = {**os.environ, "DEBUG": "1"}
    result = subprocess.run([sys.executable, "manage.py", "harness_selftest"], capture_output=True, text=True, env=env)
    assert result.returncode == 0, result.stderr
    for scenario in scenarios.SCENARIOS:
        assert scenario.control in result.stdout
    assert result.stdout.count("PASS") == len(scenarios.SCENARIOS)
