"""One outcome, told in words (core.outcome): what a run did and what it did not. A run
whose reviewer's requested changes were not taken up, or whose publish was refused for
a secret, never reads as a plain success; its limitations name why in words, with the
machine name beside them."""

from __future__ import annotations

import re
from collections.abc import Mapping

from core.effects import Plan
from core.jsonutil import JSON
from core.outcome import STOP_REASONS, describe, outcome_of
from core.outcome import WORDS as TOLD
from core.policy import Rule
from core.report import build_report
from core.scenarios import FIXED, Rig, build_rig, call, demo_policy
from core.simulated import SimWorkspace
from tests.source_files import python_files

ASKS = demo_policy(rules=[Rule(name="publishing asks", tool="publish", decision="ask"), Rule(name="rest", tool="*", decision="allow")])
WORDS = "Name the ticket, ORD-12, in the commit message."
FIX_AND_CHECK = [call("write_file", path="src/calc.py", content=FIXED), call("run_check", check_id="tests")]


def asked_for_changes(then: list[dict[str, object]]) -> Rig:
    rig = build_rig([*FIX_AND_CHECK, call("publish", message="reject negative quantities"), *then], policy=ASKS)
    state = rig.harness.run()
    assert state.waiting is not None
    rig.approvals.request_changes(state.waiting.approval_key, WORDS, "rita")
    rig.harness.run()
    return rig


def test_it_never_calls_a_run_complete_whose_reviewers_changes_were_ignored() -> None:
    rig = asked_for_changes([call("finish", summary="the patch is published")])
    state = rig.state
    assert state.status == "complete" and state.outcome == "unpublished"
    told = outcome_of(state)
    assert told.label == "completed without publishing"
    assert told.sentence == "completed without publishing: the reviewer's requested changes were not taken up (rita, on publish c3)"
    assert [(lim.reason, lim.text) for lim in told.limitations] == [
        ("changes_not_taken_up", "the reviewer's requested changes were not taken up (rita, on publish c3): nothing was published")
    ]
    report = build_report(state)
    assert report["status"] == "unpublished" and report["completed"] is False
    assert report["limitations"] == ["the reviewer's requested changes were not taken up (rita, on publish c3): nothing was published"]
    assert report["outcome"] == told.as_json()
    # The refused publish reads as what refused it, not as a failure.
    assert {"call_id": "c3", "tool": "publish", "state": "failed", "reason": "changes_requested"} in report["not_performed"]


def test_it_calls_a_run_complete_once_the_changed_call_went_through() -> None:
    rig = asked_for_changes([call("publish", message="ORD-12: reject negative quantities"), call("finish", summary="published")])
    assert rig.state.waiting is not None
    rig.approvals.grant(rig.state.waiting.approval_key)
    state = rig.harness.run()
    assert state.outcome == "complete" and state.unmet == []
    told = outcome_of(state)
    assert told.label == "complete" and told.limitations == []
    assert told.sentence == "completed: finished with passing checks on the current revision"


FINDING: dict[str, JSON] = {"path": "config.json", "line": 3, "kind": "AWS access key id", "fingerprint": "f" * 12}


def leaky_rig(then: list[dict[str, object]]) -> Rig:
    """A run whose publish's secret scan finds one secret (the policy refuses it)."""
    rig = build_rig([*FIX_AND_CHECK, call("publish", message="ship"), *then])
    workspace = rig.harness.context.workspace
    assert isinstance(workspace, SimWorkspace)
    planned = workspace.plan

    def leaky(tool: str, args: Mapping[str, JSON], idempotency_key: str, at: float) -> Plan | None:
        plan = planned(tool, args, idempotency_key, at)
        return None if plan is None else Plan(plan.effect, plan.shown, (FINDING,))

    workspace.plan = leaky  # type: ignore[method-assign]
    rig.harness.run()
    return rig


def test_it_says_a_secret_stopped_the_publish_when_the_model_finishes_anyway() -> None:
    state = leaky_rig([call("finish", summary="done")]).state
    assert state.status == "complete" and state.outcome == "unpublished"
    told = outcome_of(state)
    assert told.sentence == (
        "completed without publishing: a secret was found before publishing (AWS access key id in config.json, line 3)"
    )
    assert [lim.reason for lim in told.limitations] == ["secret_found"]


def test_it_leads_a_stopped_runs_words_with_the_root_cause_and_keeps_the_stop_beside_it() -> None:
    state = leaky_rig([]).state
    assert state.status == "stopped" and state.outcome == "proposals_exhausted"
    told = outcome_of(state)
    assert told.label == "out of proposals"
    assert told.sentence == (
        "stopped: a secret was found before publishing (AWS access key id in config.json, line 3);"
        " then out of proposals (the proposer has no further proposals)"
    )
    reasons = [lim.reason for lim in told.limitations]
    assert reasons == ["secret_found", "proposals_exhausted"]
    assert all("_" not in lim.text.split("(")[0] for lim in told.limitations), "no machine name in a limitation's words"


def test_it_has_words_for_every_status_and_stop_reason_and_no_raw_names() -> None:
    for reason in STOP_REASONS:
        told = describe("stopped", reason, "the message", unmet=[], applied=False)
        assert told.code == reason and "_" not in told.label and told.sentence.startswith(f"stopped: {told.label} (the message)")
        assert [lim.reason for lim in told.limitations] == [reason] and "_" not in told.limitations[0].text
    assert describe("running", None, "", unmet=[], applied=False).sentence == "running"
    assert describe("waiting_approval", None, "", unmet=[], applied=False).sentence == "waiting for approval"


def test_it_lists_every_stop_reason_the_code_records() -> None:
    """A reason written where a run is stopped (Stop, no_retry, stop_undriven) that
    STOP_REASONS lacks would go untold by tests/test_told_everywhere.py."""
    shape = re.compile(r"\b(?:Stop|no_retry|_stop|stop_undriven)\(\s*(?:run,\s*)?\"([a-z_]+)\"")
    written = {
        m.group(1)
        for package in ("core", "runs", "adapters", "sandbox")
        for f in python_files(package)
        for m in shape.finditer(f.read_text())
    }
    assert written and written <= set(STOP_REASONS), written - set(STOP_REASONS)
    assert all(reason in TOLD for reason in STOP_REASONS)
