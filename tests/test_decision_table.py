"""Every row of the outcomes table (docs/design.md, Outcomes), driven through the
pure loop with the scripted proposer and the simulated executor."""

from __future__ import annotations

from dataclasses import asdict

from core import feedback as fb
from core.errors import FieldProblem
from core.faults import Fault
from core.policy import Rule
from core.scenarios import FIXED, Rig, build_rig, call, demo_policy

ASK_PUBLISH = [
    Rule(name="publishing needs a reviewer", tool="publish", decision="ask", requires_evidence=True),
    Rule(name="everything else", tool="*", decision="allow"),
]
CHECKED = [
    call("write_file", path="src/calc.py", content=FIXED),
    call("run_check", check_id="tests"),
]


def test_it_returns_a_malformed_proposal_as_invalid_input_naming_the_field() -> None:
    rig = build_rig([{"tool": "read_file"}, {"tool": "read_file", "args": {}, "extra": 1}, "not an object"])
    rig.harness.run()
    problems = [[asdict(p) for p in f.problems] for f in rig.feedbacks[1:] if isinstance(f, fb.InvalidInput)]
    assert problems[0] == [{"field": "args", "message": "required, must be an object"}]
    assert problems[1] == [{"field": "extra", "message": "unexpected field (a proposal is exactly {tool, args})"}]
    assert problems[2][0]["field"] == "(root)"
    assert rig.state.proposals == 3 and rig.state.calls == 0


def test_it_returns_an_invalid_argument_naming_the_field_and_lets_the_model_correct_it() -> None:
    rig = build_rig([call("read_file", path="src/calc.py", limit=0), call("read_file", path="src/calc.py")])
    rig.harness.run()
    assert isinstance(rig.feedbacks[1], fb.InvalidInput)
    assert rig.feedbacks[1].problems[0].field == "args.limit"
    assert isinstance(rig.feedbacks[2], fb.Result)
    assert rig.state.proposals == 2 and rig.state.calls == 1


def test_it_rejects_extra_argument_fields_and_unknown_tools() -> None:
    rig = build_rig([call("read_file", path="a.py", follow=True), call("rm_rf", path=".")])
    rig.harness.run()
    assert isinstance(rig.feedbacks[1], fb.InvalidInput) and isinstance(rig.feedbacks[2], fb.InvalidInput)
    assert rig.feedbacks[1].problems[0] == FieldProblem(field="args.follow", message="unexpected field (extra fields are rejected)")
    assert rig.feedbacks[2].problems[0] == FieldProblem(field="tool", message="unknown tool 'rm_rf'")


def test_it_refuses_writes_outside_the_allowed_write_paths() -> None:
    rig = build_rig([call("write_file", path="setup.py", content="evil")])
    rig.harness.run()
    assert isinstance(rig.feedbacks[1], fb.InvalidInput)
    assert rig.feedbacks[1].problems[0].field == "args.path"
    assert "outside allowed_write_paths" in rig.feedbacks[1].problems[0].message
    assert rig.executed("write_file") == 0


def test_it_stops_tool_denied_and_nothing_reaches_the_executor() -> None:
    policy = demo_policy(rules=[Rule(name="no writes", tool="write_file", decision="deny"), Rule(name="rest", tool="*", decision="allow")])
    rig = build_rig([call("write_file", path="src/calc.py", content="x")], policy=policy)
    rig.harness.run()
    assert rig.state.outcome == "tool_denied"
    assert rig.executor.calls == []
    assert "denied" in rig.event_types()


def test_it_denies_a_tool_the_contract_does_not_allow_even_if_policy_would() -> None:
    from core.scenarios import demo_contract

    contract = demo_contract().model_copy(update={"allowed_tools": ["read_file"]})
    rig = build_rig([call("write_file", path="src/calc.py", content="x")], contract=contract)
    rig.harness.run()
    assert rig.state.outcome == "tool_denied" and rig.executor.calls == []


def test_it_retries_a_transient_failure_with_the_same_call_id_and_exponential_backoff() -> None:
    rig = build_rig([call("read_file", path="src/calc.py")], faults=[Fault("read_file", "transient", 2)])
    rig.harness.run()
    assert [c.call_id for c in rig.executor.calls] == ["c1"]  # the two faults never reached it
    assert rig.clock.slept == [0.5, 1.0]
    assert rig.store.ledger["c1"].attempts == 3 and rig.state.calls == 3
    assert rig.event_types().count("retry") == 2


def test_it_stops_attempt_limit_when_attempts_run_out() -> None:
    rig = build_rig([call("read_file", path="src/calc.py")], faults=[Fault("read_file", "transient", 9)])
    rig.harness.run()
    assert rig.state.outcome == "attempt_limit"
    assert rig.store.ledger["c1"].attempts == 3


def test_it_waits_for_approval_and_sends_the_request_with_its_arguments() -> None:
    rig = build_rig(CHECKED + [call("publish", message="fix")], policy=demo_policy(rules=ASK_PUBLISH))
    rig.harness.run()
    assert rig.state.status == "waiting_approval"
    ask = next(iter(rig.approvals.requests.values()))
    assert ask.tool == "publish" and dict(ask.args) == {"message": "fix"}
    assert ask.revision == rig.state.revision
    assert ask.evidence and ask.evidence[0]["check_id"] == "tests"
    assert rig.executed("publish") == 0


def test_it_executes_after_a_grant_and_the_approval_is_used_once() -> None:
    script = CHECKED + [call("publish", message="fix"), call("publish", message="fix"), call("publish", message="other")]
    rig = build_rig(script, policy=demo_policy(rules=ASK_PUBLISH))
    rig.harness.run()
    assert rig.state.waiting is not None
    key = rig.state.waiting.approval_key
    rig.approvals.grant(key)
    rig.harness.run()
    assert rig.executed("publish") == 1
    # The identical second publish is the same effect: a duplicate, nobody is asked.
    assert isinstance(rig.feedbacks[4], fb.Duplicate) and rig.feedbacks[4].of_call == "c3"
    # A different publish needs a new approval of its own.
    assert rig.state.status == "waiting_approval"
    assert rig.event_types().count("approval_required") == 2


def test_it_stops_denied_when_the_reviewer_denies() -> None:
    rig = build_rig(CHECKED + [call("publish", message="fix")], policy=demo_policy(rules=ASK_PUBLISH))
    rig.harness.run()
    assert rig.state.waiting is not None
    rig.approvals.deny(rig.state.waiting.approval_key, "not during the freeze")
    rig.harness.run()
    assert rig.state.outcome == "denied"
    assert "not during the freeze" in rig.state.stop_message
    assert rig.executed("publish") == 0


def test_it_records_a_pending_effect_for_an_unknown_write_and_blocks_writes_and_completion() -> None:
    script = CHECKED + [
        call("publish", message="fix"),
        call("write_file", path="src/calc.py", content="x"),
        call("finish", summary="done"),
    ]
    rig = build_rig(script, faults=[Fault("publish", "timeout", 1)], lookup_authoritative=False)
    rig.harness.run()
    assert rig.state.pending_effects[0].tool == "publish"
    assert isinstance(rig.feedbacks[4], fb.WriteBlocked)
    assert rig.executed("write_file") == 1
    assert rig.state.outcome == "unresolved"


def test_it_keeps_the_outcome_unknown_when_the_lookup_is_empty_but_not_authoritative() -> None:
    script = CHECKED + [call("publish", message="fix")]
    rig = build_rig(script + [call("read_file", path="src/calc.py")], faults=[Fault("publish", "timeout", 1)], lookup_authoritative=False)
    rig.harness.run()
    assert rig.state.unresolved_effects(), "an empty non-authoritative lookup must not resolve the effect"
    assert "effect_reconciled" not in rig.event_types()


def test_it_reconciles_an_unknown_write_by_an_authoritative_lookup() -> None:
    script = CHECKED + [call("publish", message="fix"), call("finish", summary="done")]
    rig = build_rig(script, faults=[Fault("publish", "unknown", 1)], lookup_authoritative=True)
    rig.harness.run()
    effect = rig.state.pending_effects[0]
    assert effect.resolved and effect.applied  # the fault let the publish through
    assert rig.state.outcome == "complete"
    assert rig.state.effects_applied == ["c3"]


def test_it_answers_finish_without_a_passing_check_with_check_required_and_the_revision() -> None:
    rig = build_rig([call("write_file", path="src/calc.py", content=FIXED), call("finish", summary="done")])
    rig.harness.run()
    assert rig.feedbacks[2] == fb.CheckRequired(call_id="c2", revision=rig.state.revision, missing=["tests"])
    assert rig.state.outcome == "proposals_exhausted"


def test_it_does_not_count_a_failing_check_as_evidence() -> None:
    rig = build_rig(CHECKED + [call("finish", summary="done")], check_passes=lambda files, check_id: False)
    rig.harness.run()
    assert rig.state.evidence[0].passed is False
    assert isinstance(rig.feedbacks[3], fb.CheckRequired)


def test_it_completes_on_a_passing_check_of_the_current_revision_with_nothing_pending() -> None:
    rig = build_rig(CHECKED + [call("finish", summary="done")])
    rig.harness.run()
    assert rig.state.outcome == "complete"
    assert rig.state.evidence[0].revision == rig.state.revision


def test_it_stops_receipt_invalid_and_a_write_with_a_bad_receipt_becomes_pending() -> None:
    rig = build_rig([call("write_file", path="src/calc.py", content=FIXED)], faults=[Fault("write_file", "invalid_receipt", 1)])
    rig.harness.run()
    assert rig.state.outcome == "receipt_invalid"
    assert rig.state.pending_effects[0].call_id == "c1"
    assert rig.store.ledger["c1"].state == "unknown"


def test_it_stops_killed_by_the_kill_switch_before_the_next_call() -> None:
    class KillAfterFirst:
        def __init__(self, rig: Rig) -> None:
            self.rig = rig

        def kill_requested(self) -> bool:
            return len(self.rig.executor.calls) >= 1

    rig = build_rig([call("read_file", path="src/calc.py"), call("read_file", path="src/calc.py")])
    rig.harness.context.controls = KillAfterFirst(rig)
    rig.harness.run()
    assert rig.state.outcome == "killed"
    assert len(rig.executor.calls) == 1


def test_it_never_reports_a_stopped_run_as_completed() -> None:
    from core.report import build_report

    rig = build_rig([call("read_file", path="src/calc.py")], faults=[Fault("read_file", "invalid_receipt", 1)])
    rig.harness.run()
    report = build_report(rig.state)
    assert report["completed"] is False and report["status"] == "receipt_invalid"
    assert report["limitations"]
