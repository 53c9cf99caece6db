"""Effects happen once (docs/design.md, Outcomes, Approvals): the idempotency key of an external
effect is what the effect is (run, tool, canonical arguments, revision), so the same
effect proposed again, by a retry, after a reconciliation or by a model repeating
itself, performs nothing, asks nobody, and returns the first outcome as a duplicate."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from core import feedback as fb
from core.faults import Fault
from core.policy import Rule
from core.scenarios import FIXED, build_rig, call, demo_policy
from runs.models import PublishedPatch
from runs.persistence.outbox import published_patch
from tests.helpers import new_policy_version, run_command
from tests.runs_waiting import DEMO_CONTRACT, DEMO_SCRIPT

CHECKED = [call("write_file", path="src/calc.py", content=FIXED), call("run_check", check_id="tests")]


@pytest.mark.django_db(transaction=True)
@pytest.mark.docker
def test_it_publishes_once_when_the_model_repeats_a_publish_after_a_reconciliation(tmp_path: Path) -> None:
    """Issue 11, case 1, exactly: ``--fault publish:unknown:1`` and the proposals
    run_check, publish M, lookup_publish, publish M, finish."""
    new_policy_version(publish="allow")
    patch = DEMO_SCRIPT[1]
    message = "Reject negative quantities in order_total"
    script = [
        patch,
        call("run_check", check_id="tests"),
        call("publish", message=message),
        call("lookup_publish"),
        call("publish", message=message),
        call("finish", summary="done"),
    ]
    contract, proposals = tmp_path / "contract.json", tmp_path / "proposals.json"
    contract.write_text(json.dumps(DEMO_CONTRACT))
    proposals.write_text(json.dumps(script))
    code, out, err = run_command("run_task", str(contract), "--script", str(proposals), "--fault", "publish:unknown:1", "--json")
    report = json.loads(out)
    assert code == 0 and report["status"] == "complete", (err, report["message"])
    assert report["effects_applied"] == ["c3"]
    events = report["events"]
    assert [e["payload"]["applied"] for e in events if e["type"] == "effect_reconciled"] == [True]
    lookup = next(e for e in events if e["type"] == "receipt_recorded" and e["payload"]["tool"] == "lookup_publish")
    assert lookup["payload"]["receipt"]["data"]["found"] is True  # no key needed from the model
    [duplicate] = [e for e in events if e["type"] == "duplicate_effect"]
    assert duplicate["call_id"] == "c5" and duplicate["payload"]["of_call"] == "c3"
    assert duplicate["payload"]["status"] == "applied"
    key = duplicate["payload"]["idempotency_key"]
    assert [e["payload"]["idempotency_key"] for e in events if e["type"] == "call_started" and e["payload"]["tool"] == "publish"] == [key]
    assert list(PublishedPatch.objects.filter(key=key).values_list("key", flat=True)) == [key] and published_patch(key)
    assert {"call_id": "c5", "tool": "publish", "state": "duplicate", "of_call": "c3"} in report["not_performed"]


ASK_PUBLISH = [
    Rule(name="publishing needs a reviewer", tool="publish", decision="ask", requires_evidence=True),
    Rule(name="everything else", tool="*", decision="allow"),
]


def test_it_asks_no_reviewer_again_for_an_effect_that_already_happened() -> None:
    rig = build_rig(CHECKED + [call("publish", message="fix"), call("publish", message="fix")], policy=demo_policy(rules=ASK_PUBLISH))
    rig.harness.run()
    assert rig.state.waiting is not None
    rig.approvals.grant(rig.state.waiting.approval_key)
    rig.harness.run()
    assert rig.executed("publish") == 1
    assert len(rig.approvals.requests) == 1
    assert isinstance(rig.feedbacks[4], fb.Duplicate) and rig.feedbacks[4].first_outcome["kind"] == "result"


def test_it_does_not_perform_an_effect_again_while_its_first_outcome_is_unknown() -> None:
    script = CHECKED + [call("publish", message="fix"), call("publish", message="fix")]
    rig = build_rig(script, faults=[Fault("publish", "timeout", 1)], lookup_authoritative=False)
    rig.harness.run()
    assert rig.executed("publish") == 0  # the timeout fault never reached the outbox
    assert isinstance(rig.feedbacks[4], fb.Duplicate) and rig.feedbacks[4].status == "unknown"
    assert rig.state.unresolved_effects()


def test_it_performs_the_same_effect_again_once_the_first_is_known_not_to_have_happened() -> None:
    script = CHECKED + [call("publish", message="fix"), call("read_file", path="src/calc.py"), call("publish", message="fix")]
    rig = build_rig(script, faults=[Fault("publish", "timeout", 1)], lookup_authoritative=True)
    rig.harness.run()
    # The timeout is reconciled as not applied (not in the outbox): the same publish may go.
    assert rig.executed("publish") == 1 and len(rig.executor.outbox) == 1
    assert "duplicate_effect" not in rig.event_types()
    assert rig.state.effects_applied == ["c5"]


def test_it_keys_an_effect_by_what_it_is_not_by_the_call() -> None:
    script = CHECKED + [call("publish", message="fix"), call("publish", message="other words")]
    rig = build_rig(script)
    rig.harness.run()
    keys = [c.idempotency_key for c in rig.executor.calls if c.tool == "publish"]
    assert len(keys) == 2 and keys[0] != keys[1]  # different arguments: a different effect
    assert rig.state.effects_applied == ["c3", "c4"]


def test_it_refuses_a_lookup_without_a_key_when_there_is_nothing_to_look_up() -> None:
    rig = build_rig([call("lookup_publish")])
    rig.harness.run()
    assert isinstance(rig.feedbacks[1], fb.InvalidInput)
    assert rig.feedbacks[1].problems[0].field == "args.idempotency_key"
    assert rig.executor.calls == []
