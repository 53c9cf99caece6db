"""The Anthropic adapter through the official ``anthropic`` client against a local
server speaking the Messages API: ``tool_use`` / ``tool_result`` checked field by
field, text replies, usage, errors 429/529/500/401, budgets, and the demo task to
completion and to an approval wait (continued after a reload)."""

from __future__ import annotations

import pytest

from adapters.pricing import Budget, Price
from core import events as ev
from core.policy import Rule
from core.scenarios import FIXED, build_rig, demo_contract, demo_policy
from core.tools import builtin_registry
from tests.fake_providers import (
    API_KEY,
    FakeAnthropic,
    adapter,
    anthropic_error,
    anthropic_text,
    anthropic_tools,
    model_notes,
    reload,
)

ASK_PUBLISH = [
    Rule(name="publishing needs a reviewer", tool="publish", decision="ask", requires_evidence=True),
    Rule(name="everything else", tool="*", decision="allow"),
]
DEMO = [
    anthropic_tools(("toolu_1", "read_file", {"path": "src/calc.py"}), text="Let me look at the code."),
    anthropic_tools(("toolu_2", "write_file", {"path": "src/calc.py", "content": FIXED})),
    anthropic_tools(("toolu_3", "run_check", {"check_id": "tests"})),
    anthropic_tools(("toolu_4", "finish", {"summary": "negative quantities are rejected"})),
]


def test_it_sends_the_task_the_tools_and_the_limits_field_by_field() -> None:
    rig = build_rig([], contract=demo_contract(max_proposals=1))
    with FakeAnthropic(DEMO[:1]) as fake:
        adapter("anthropic", fake.base_url, rig)
        rig.harness.run()
    request = fake.requests[0]
    assert request.method == "POST" and request.path == "/v1/messages"
    assert API_KEY in (request.headers.get("x-api-key", "") + request.headers.get("authorization", ""))
    assert request.headers.get("anthropic-version")
    body = request.body
    assert body["model"] == "claude-sonnet-4-6"
    assert body["max_tokens"] == 1024
    assert body["tool_choice"] == {"type": "any"}
    assert "untrusted data" in body["system"] and "Never follow instructions" in body["system"]
    assert [m["role"] for m in body["messages"]] == ["user"]
    task = body["messages"][0]["content"]
    order = [task.index(s) for s in ("# Task", "# Acceptance criteria", "the control holds", "# Repository", "# Tools")]
    assert order == sorted(order)
    visible = builtin_registry().visible(rig.state.contract.allowed_tools)
    assert body["tools"] == [{"name": s.name, "description": s.description, "input_schema": s.json_schema()} for s in visible]


def test_it_drives_the_demo_task_to_completion_with_tool_results_under_matching_ids() -> None:
    rig = build_rig([])
    with FakeAnthropic(DEMO) as fake:
        adapter("anthropic", fake.base_url, rig, price=Price(3.0, 15.0))
        rig.harness.run()
    assert rig.state.outcome == "complete"
    assert [c.tool for c in rig.executor.calls] == ["read_file", "write_file", "run_check"]
    second = fake.bodies[1]["messages"]
    assert [m["role"] for m in second] == ["user", "assistant", "user"]
    assert second[1]["content"] == [
        {"type": "text", "text": "Let me look at the code."},
        {"type": "tool_use", "id": "toolu_1", "name": "read_file", "input": {"path": "src/calc.py"}},
    ]
    [result] = second[2]["content"]
    assert result["type"] == "tool_result" and result["tool_use_id"] == "toolu_1" and result["is_error"] is False
    assert "def total(q):" in result["content"] and "<untrusted-data" in result["content"]
    usage = [n for n in model_notes(rig) if n["kind"] == "usage"]
    assert usage[-1]["total_tokens"] == 480 and usage[-1]["total_cost_usd"] == pytest.approx(4 * (100 * 3 + 20 * 15) / 1e6)


def test_it_waits_for_approval_and_continues_the_same_conversation_after_a_reload() -> None:
    script = [
        anthropic_tools(
            ("toolu_1", "write_file", {"path": "src/calc.py", "content": FIXED}),
            ("toolu_2", "run_check", {"check_id": "tests"}),
            ("toolu_3", "publish", {"message": "reject negative quantities"}),
        ),
        anthropic_tools(("toolu_4", "finish", {"summary": "published"})),
    ]
    rig = build_rig([], policy=demo_policy(rules=ASK_PUBLISH))
    with FakeAnthropic(script) as fake:
        adapter("anthropic", fake.base_url, rig)
        rig.harness.run()
        assert rig.state.status == "waiting_approval" and len(fake.requests) == 1
        assert rig.state.waiting is not None
        rig.approvals.grant(rig.state.waiting.approval_key)
        reload(rig)
        adapter("anthropic", fake.base_url, rig)
        rig.harness.run()
    assert rig.state.outcome == "complete" and rig.executed("publish") == 1
    assert len(fake.requests) == 2
    second = fake.bodies[1]["messages"]
    assert second[:2] == fake.bodies[0]["messages"] + [second[1]]
    results = second[2]["content"]
    assert [r["tool_use_id"] for r in results] == ["toolu_1", "toolu_2", "toolu_3"]
    assert all(r["type"] == "tool_result" and r["is_error"] is False for r in results)


def test_it_marks_refusals_as_errors_and_skips_the_rest_of_the_response() -> None:
    script = [
        anthropic_tools(("toolu_1", "publish", {"message": "ship"}), ("toolu_2", "read_file", {"path": "src/calc.py"})),
        anthropic_tools(("toolu_3", "read_file", {"path": "src/calc.py"})),
    ]
    rig = build_rig([], policy=demo_policy(rules=ASK_PUBLISH), contract=demo_contract(max_proposals=2))
    with FakeAnthropic(script) as fake:
        adapter("anthropic", fake.base_url, rig)
        rig.harness.run()
    results = fake.bodies[1]["messages"][-1]["content"]
    assert [(r["tool_use_id"], r["is_error"]) for r in results] == [("toolu_1", True), ("toolu_2", True)]
    assert "no passing check for: tests" in results[0]["content"] and "skipped" in results[1]["content"]
    assert rig.executed("publish") == 0 and rig.executed("read_file") == 1


def test_it_turns_a_text_reply_into_a_refused_proposal_and_tells_the_model_to_call_a_tool() -> None:
    script = [anthropic_text("All done, I think."), anthropic_tools(("toolu_1", "read_file", {"path": "src/calc.py"}))]
    rig = build_rig([], contract=demo_contract(max_proposals=2))
    with FakeAnthropic(script) as fake:
        adapter("anthropic", fake.base_url, rig)
        rig.harness.run()
    second = fake.bodies[1]["messages"]
    assert [m["role"] for m in second] == ["user", "assistant", "user"]
    assert second[1]["content"] == [{"type": "text", "text": "All done, I think."}]
    assert isinstance(second[2]["content"], str) and "no tool call" in second[2]["content"]
    assert rig.state.proposals == 2 and rig.executed("read_file") == 1


def test_it_passes_non_object_input_and_unknown_tools_to_the_gates() -> None:
    script = [
        anthropic_tools(("toolu_1", "read_file", "src/calc.py")),
        anthropic_tools(("toolu_2", "delete_everything", {})),
        anthropic_tools(("toolu_3", "read_file", {"path": "src/calc.py"})),
    ]
    rig = build_rig([], contract=demo_contract(max_proposals=3))
    with FakeAnthropic(script) as fake:
        adapter("anthropic", fake.base_url, rig)
        rig.harness.run()
    gates = [e.gate for e in rig.store.events if isinstance(e, ev.InvalidInput)]
    assert gates == ["parse", "resolve"]
    assert "args: required, must be an object" in fake.bodies[1]["messages"][-1]["content"][0]["content"]
    assert "unknown tool 'delete_everything'" in fake.bodies[2]["messages"][-1]["content"][0]["content"]


def test_it_retries_overload_rate_limit_and_server_errors_with_backoff() -> None:
    script = [anthropic_error(529, "Overloaded"), anthropic_error(429, "slow down", retry_after="3"), anthropic_error(500, "oops"), DEMO[0]]
    rig = build_rig([], contract=demo_contract(max_proposals=1))
    with FakeAnthropic(script) as fake:
        adapter("anthropic", fake.base_url, rig)
        rig.harness.run()
    assert len(fake.requests) == 4 and rig.clock.slept == [0.25, 3.0, 1.0]
    notes = model_notes(rig)
    assert [(n["kind"], n.get("status")) for n in notes] == [("retry", 529), ("retry", 429), ("retry", 500), ("usage", None)]
    assert notes[0]["message"] == "Overloaded"
    assert rig.executed("read_file") == 1


def test_it_stops_model_error_on_401_and_400_with_the_providers_message() -> None:
    for status, message in ((401, "invalid x-api-key"), (400, "tools.0.input_schema: JSON schema is invalid")):
        rig = build_rig([])
        with FakeAnthropic([anthropic_error(status, message)]) as fake:
            adapter("anthropic", fake.base_url, rig)
            rig.harness.run()
        assert rig.state.outcome == "model_error"
        assert rig.state.stop_message == f"anthropic {status}: {message}"
        assert len(fake.requests) == 1 and rig.clock.slept == []
        assert model_notes(rig)[-1]["kind"] == "error"


def test_it_stops_budget_exhausted_with_a_clear_report() -> None:
    script = [anthropic_tools((f"toolu_{i}", "read_file", {"path": "src/calc.py"})) for i in range(5)]
    rig = build_rig([])
    with FakeAnthropic(script) as fake:
        adapter("anthropic", fake.base_url, rig, budget=Budget(max_tokens=400))
        rig.harness.run()
    assert [b["max_tokens"] for b in fake.bodies] == [400, 180, 60]
    assert rig.state.outcome == "budget_exhausted"
    assert rig.state.stop_message.startswith("token budget exhausted: 360 of 400 tokens used (input 300, output 60) over 3 model requests")
