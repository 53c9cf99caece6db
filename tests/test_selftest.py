"""The controls self-test, and one ablation per control: with that control removed,
the failure it prevents gets through (so each control is load-bearing)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable, Mapping
from typing import cast

import pytest

from core import scenarios
from core.jsonutil import JSON
from core.loop import Harness
from core.policy import Authorization
from core.receipts import Receipt
from core.scenarios import HarnessFactory
from core.state import CallRecord, Operation, PendingEffect
from core.tools import ToolSpec


class NoAuthorize(Harness):
    def _authorize(self, spec: ToolSpec, args: Mapping[str, JSON]) -> Authorization:
        return Authorization("allow", "ablated", False)


class NoEvidenceBinding(Harness):
    def _missing_evidence(self) -> list[str]:
        passed = {e.check_id for e in self.state.evidence if e.passed}
        return [c for c in self.state.contract.verification_targets if c not in passed]


class NoProposalBudget(Harness):
    def _proposal_budget_left(self) -> bool:
        return True


class NoReceiptCheck(Harness):
    def _check_receipt(self, raw: object, record: CallRecord, spec: ToolSpec, harness_revision: str) -> Receipt:
        return Receipt.model_validate({**cast(dict[str, JSON], raw), "call_id": record.call_id})  # the simulated receipt is an object


class NoPendingBlock(Harness):
    def _blocking_effects(self) -> list[PendingEffect]:
        return []


class NoAttemptLimit(Harness):
    def _attempts_left(self, record: CallRecord) -> bool:
        return record.attempts < 50


class NoValidation(Harness):
    def _validate(self, spec: ToolSpec, args: dict[str, JSON]) -> dict[str, JSON]:
        return dict(args)


class NoInfrastructureOutcome(Harness):
    def _infrastructure_failure(self, receipt: Receipt) -> str | None:
        return None


class NoOperationKeys(Harness):
    def _already_done(self, record: CallRecord) -> Operation | None:
        return None


ABLATIONS = [
    (scenarios.denied_tool, NoAuthorize),
    (scenarios.stale_check, NoEvidenceBinding),
    (scenarios.exhausted_budget, NoProposalBudget),
    (scenarios.inconsistent_receipt, NoReceiptCheck),
    (scenarios.unknown_write, NoPendingBlock),
    (scenarios.transient_retry, NoAttemptLimit),
    (scenarios.invalid_argument, NoValidation),
    (scenarios.failing_sandbox, NoInfrastructureOutcome),
    (scenarios.repeated_effect, NoOperationKeys),
]


def test_it_holds_every_control_with_the_real_core() -> None:
    results = scenarios.run_scenarios()
    assert [ok for _, ok, _ in results] == [True] * len(scenarios.SCENARIOS), results


def test_it_covers_each_scenario_with_an_ablation() -> None:
    assert {s.run for s in scenarios.SCENARIOS} == {scenario for scenario, _ in ABLATIONS}


@pytest.mark.parametrize(("scenario", "ablated"), ABLATIONS, ids=[a.__name__ for _, a in ABLATIONS])
def test_it_lets_the_failure_through_when_the_control_is_removed(
    scenario: Callable[[HarnessFactory], tuple[bool, str]], ablated: HarnessFactory
) -> None:
    ok, detail = scenario(ablated)
    assert not ok, f"{ablated.__name__} did not break {scenario.__name__}: {detail}"


def test_it_exits_zero_from_the_selftest_command_and_prints_a_row_per_control() -> None:
    result = subprocess.run([sys.executable, "manage.py", "harness_selftest"], capture_output=True, text=True, env=_env())
    assert result.returncode == 0, result.stderr
    for scenario in scenarios.SCENARIOS:
        assert scenario.control in result.stdout
    assert result.stdout.count("PASS") == len(scenarios.SCENARIOS)


def _env() -> dict[str, str]:
    import os

    return {**os.environ, "DEBUG": "1"}
