"""The loop's feedback to the proposer is one class per kind (core.feedback),
stored as the same plain objects runs in flight already hold, and rendered for the
model by matching every kind."""

from __future__ import annotations

import typing

import pytest
from pydantic import ValidationError

import core.scenarios as scenarios
from adapters.calls import ToolCall
from adapters.feedback import render_feedback
from core import feedback as fb
from core.errors import FieldProblem
from core.scenarios import build_rig, call
from core.simulated import MemoryStore
from core.state import PendingEffect

PENDING = PendingEffect(
    call_id="c3", tool="publish", args={"message": "m"}, kind="external", idempotency_key="k" * 32, reason="timeout", recorded_at=1.0
)

# One of each kind, with the object a stored run holds for it.
STORED: list[tuple[fb.Feedback, dict[str, object]]] = [
    (
        fb.Result(call_id="c1", tool="read_file", revision="r1", data={"text": "x"}, artifacts=[]),
        {"kind": "result", "call_id": "c1", "tool": "read_file", "revision": "r1", "data": {"text": "x"}, "artifacts": []},
    ),
    (
        fb.Result(call_id="c2", tool="run_check", revision="r1", data={}, artifacts=["a"], earlier_attempts=["lost"]),
        {
            "kind": "result",
            "call_id": "c2",
            "tool": "run_check",
            "revision": "r1",
            "data": {},
            "artifacts": ["a"],
            "earlier_attempts": ["lost"],
        },
    ),
    (
        fb.InvalidInput(call_id="c1", problems=[FieldProblem(field="args.path", message="required")]),
        {"kind": "invalid_input", "call_id": "c1", "problems": [{"field": "args.path", "message": "required"}]},
    ),
    (
        fb.CheckRequired(call_id="c4", revision="r2", missing=["tests"]),
        {"kind": "check_required", "call_id": "c4", "revision": "r2", "missing": ["tests"]},
    ),
    (fb.WriteBlocked(call_id="c5", pending=[PENDING]), {"kind": "write_blocked", "call_id": "c5", "pending": [PENDING.model_dump()]}),
    (
        fb.OutcomeUnknown(call_id="c3", tool="publish", idempotency_key="k" * 32, data={"error": "timeout"}),
        {"kind": "outcome_unknown", "call_id": "c3", "tool": "publish", "idempotency_key": "k" * 32, "data": {"error": "timeout"}},
    ),
    (
        fb.Duplicate(
            call_id="c6", tool="publish", of_call="c3", idempotency_key="k" * 32, status="applied", first_outcome={"kind": "result"}
        ),
        {
            "kind": "duplicate",
            "call_id": "c6",
            "tool": "publish",
            "of_call": "c3",
            "idempotency_key": "k" * 32,
            "status": "applied",
            "first_outcome": {"kind": "result"},
        },
    ),
    (fb.Interrupted(call_id="c7", tool="write_file"), {"kind": "interrupted", "call_id": "c7", "tool": "write_file"}),
    (
        fb.ChangesRequested(call_id="c8", tool="publish", message="name the ticket", by="rita"),
        {"kind": "changes_requested", "call_id": "c8", "tool": "publish", "message": "name the ticket", "by": "rita"},
    ),
    (fb.Complete(call_id="c8"), {"kind": "complete", "call_id": "c8"}),
]


def test_it_stores_each_kind_as_runs_in_flight_hold_it() -> None:
    for feedback, stored in STORED:
        assert feedback.to_json() == stored
        assert list(feedback.to_json()) == list(stored)  # the order the model is shown
        assert fb.feedback_from_json(stored) == feedback


def test_it_has_a_stored_example_of_every_kind() -> None:
    (union,) = typing.get_args(fb.Feedback)[:1]
    kinds = set(typing.get_args(union))
    assert {type(feedback) for feedback, _ in STORED} == kinds


def test_it_refuses_a_stored_feedback_of_a_kind_it_does_not_know() -> None:
    with pytest.raises(ValidationError):
        fb.feedback_from_json({"kind": "shrug", "call_id": "c1"})


def test_it_renders_every_kind_and_says_which_are_refusals() -> None:
    call = ToolCall("t1", "read_file", {})
    refused = {type(feedback): render_feedback(feedback, call, 10_000)[1] for feedback, _ in STORED}
    assert refused == {
        fb.Result: False,
        fb.InvalidInput: True,
        fb.CheckRequired: True,
        fb.WriteBlocked: True,
        fb.OutcomeUnknown: True,
        fb.Duplicate: True,
        fb.Interrupted: True,
        fb.ChangesRequested: True,
        fb.Complete: False,
    }


def test_it_says_a_check_result_is_not_evidence_only_for_a_tool_whose_receipts_are() -> None:
    result = STORED[1][0]
    as_evidence, _ = render_feedback(result, None, 10_000, evidence_tools=["run_check"])
    plain, _ = render_feedback(result, None, 10_000)
    assert "does not count as evidence" in as_evidence and "does not count as evidence" not in plain
    assert "1 failed attempt(s) that proved nothing" in plain and "lost" in plain


def test_it_gives_the_proposer_the_feedback_the_fold_made_without_validating_it_again(monkeypatch: pytest.MonkeyPatch) -> None:
    validated: list[object] = []
    adapter = fb._ADAPTER

    class Counting:
        def validate_python(self, raw: object) -> fb.Feedback:
            validated.append(raw)
            return adapter.validate_python(raw)

    monkeypatch.setattr(fb, "_ADAPTER", Counting())
    # No fold of the log after each checkpoint (the one a production store makes): a
    # fold's own feedback would be the last one made.
    monkeypatch.setattr(scenarios, "MemoryStore", lambda: MemoryStore(verify=False))
    script = [call("read_file", path="src/calc.py"), call("read_file"), call("write_file", path="src/calc.py", content="x = 1\n")]
    rig = build_rig(script)
    rig.harness.run()
    shown = [f for f in rig.feedbacks if f is not None]
    assert len(shown) == 3 and not validated
    # What validating the object the state holds would have given.
    assert all(adapter.validate_python(f.to_json()) == f for f in shown)


def test_it_validates_any_object_but_the_one_the_fold_made_last() -> None:
    for feedback, raw in STORED:
        held = fb.stored(feedback)
        assert fb.feedback_from_json(held) is feedback
        assert fb.feedback_from_json(dict(held)) == feedback and fb.feedback_from_json(dict(held)) is not feedback
        assert fb.feedback_from_json(raw) is not feedback
    with pytest.raises(ValidationError):
        fb.feedback_from_json({**fb.stored(fb.Complete(call_id="c9")), "kind": "finished"})
