"""The task contract: validation names every offending field; limits intersect."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from core.contract import Limits, check_contract
from core.errors import InputError
from pages.new_run import run_inputs

TOOLS = {"read_file", "write_file", "run_check", "publish"}
CHECKS = {"tests"}
GOOD: dict[str, Any] = {
    "task_id": "fix-orders",
    "objective": "Reject negative quantities",
    "acceptance_criteria": ["tests pass"],
    "workspace": {"kind": "path", "path": "examples/orders"},
    "allowed_write_paths": ["orders/*"],
    "allowed_tools": ["read_file", "write_file", "run_check"],
    "verification_targets": ["tests"],
    "limits": {"max_proposals": 20, "max_tool_calls": 20, "max_attempts": 3, "wall_time_seconds": 600, "max_output_bytes_per_call": 65536},
}


def fields(raw: object) -> set[str]:
    with pytest.raises(InputError) as caught:
        check_contract(raw, TOOLS, CHECKS)
    return {p.field for p in caught.value.problems}


def test_it_accepts_a_good_contract() -> None:
    assert check_contract(copy.deepcopy(GOOD), TOOLS, CHECKS).task_id == "fix-orders"


def test_it_names_every_offending_field_at_once() -> None:
    bad = copy.deepcopy(GOOD)
    bad["task_id"] = "has spaces"
    bad["acceptance_criteria"] = []
    bad["limits"]["max_attempts"] = 0
    bad["limits"]["wall_time_seconds"] = "600"
    bad["workspace"]["kind"] = "ftp"
    bad["allowed_write_paths"] = ["../etc/*"]
    bad["surprise"] = True
    del bad["objective"]
    assert fields(bad) == {
        "task_id",
        "acceptance_criteria",
        "limits.max_attempts",
        "limits.wall_time_seconds",
        "workspace.kind",
        "allowed_write_paths",
        "surprise",
        "objective",
    }


def test_it_names_unknown_tools_and_checks() -> None:
    bad = copy.deepcopy(GOOD)
    bad["allowed_tools"] = ["read_file", "shell"]
    bad["verification_targets"] = ["lint"]
    assert fields(bad) == {"allowed_tools[1]", "verification_targets[0]"}


def test_it_refuses_non_objects_and_bad_json_with_a_message() -> None:
    assert fields([1, 2]) == {"(root)"}
    # A contract's text is read by the new-run form (the API's is JSON already).
    with pytest.raises(InputError, match="not valid JSON"):
        run_inputs("", "{nope", "scripted", "")
    contract, _ = run_inputs("", json.dumps(GOOD), "scripted", "")
    assert check_contract(contract, TOOLS, CHECKS).limits.max_attempts == 3


def test_it_intersects_limits_with_policy_so_a_contract_cannot_grant_itself_more() -> None:
    asked = Limits(max_proposals=500, max_tool_calls=10, max_attempts=9, wall_time_seconds=60, max_output_bytes_per_call=2048)
    bound = Limits(max_proposals=100, max_tool_calls=100, max_attempts=3, wall_time_seconds=3600, max_output_bytes_per_call=4096)
    effective = asked.intersect(bound)
    assert effective.model_dump() == {
        "max_proposals": 100,
        "max_tool_calls": 10,
        "max_attempts": 3,
        "wall_time_seconds": 60,
        "max_output_bytes_per_call": 2048,
    }
    assert set(asked.clipped_by(bound)) == {"max_proposals", "max_attempts"}
