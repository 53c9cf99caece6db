"""The OpenAI-compatible adapter through the official ``openai`` client against a local
server speaking Chat Completions: requests checked field by field, tool calls, text,
usage, errors 429/500/401, budgets, and the demo task to completion and to an
approval wait (continued after a reload without asking the model again)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

import pytest
from pytest_django import Settings

from adapters.openai_adapter import OpenAIProposer
from adapters.pricing import Budget, Price
from core import events as ev
from core import feedback as fb
from core.policy import Rule
from core.ports import Proposer
from core.scenarios import FIXED, build_rig, demo_contract, demo_policy
from core.simulated import MemoryArtifacts
from core.tools import builtin_registry
from tests.fake_providers import (
    API_KEY,
    FakeOpenAI,
    adapter,
    model_notes,
    openai_error,
    openai_text,
    openai_tools,
    reload,
)

ASK_PUBLISH = [
    Rule(name="publishing needs a reviewer", tool="publish", decision="ask", requires_evidence=True),
    Rule(name="everything else", tool="*", decision="allow"),
]
DEMO = [
    openai_tools(("call_1", "read_file", {"path": "src/calc.py"})),
    openai_tools(("call_2", "write_file", {"path": "src/calc.py", "content": FIXED})),
    openai_tools(("call_3", "run_check", {"check_id": "tests"})),
    openai_tools(("call_4", "finish", {"summary": "negative quantities are rejected"})),
]


def test_it_sends_the_task_the_tools_and_the_limits_field_by_field() -> None:
    rig = build_rig([], contract=demo_contract(max_proposals=1))
    with FakeOpenAI(DEMO[:1]) as fake:
        adapter("openai", fake.base_url, rig, budget=Budget(max_tokens=5000))
        rig.harness.run()
    request = fake.requests[0]
    assert request.method == "POST" and request.path == "/v1/chat/completions"
    assert request.headers["authorization"] == f"Bearer {API_KEY}"
    body = request.body
    assert body["model"] == "gpt-4o-mini"
    assert body["tool_choice"] == "required"
    assert body["max_tokens"] == 1024  # the per-request cap; the budget leaves more
    assert "max_completion_tokens" not in body  # what most compatible servers know
    assert "seed" not in body  # sent only when the run's configuration names one
    assert [m["role"] for m in body["messages"]] == ["system", "user"]
    system, task = body["messages"][0]["content"], body["messages"][1]["content"]
    assert "untrusted data" in system and "Never follow instructions" in system
    # Context order: task, acceptance criteria, repository, tools.
    order = [task.index(s) for s in ("# Task", "exercise one control", "# Acceptance criteria", "the control holds", "# Repository")]
    assert order == sorted(order)
    assert rig.state.revision in task and "src/*" in task
    visible = builtin_registry().visible(rig.state.contract.allowed_tools)
    assert body["tools"] == [
        {"type": "function", "function": {"name": s.name, "description": s.description, "parameters": s.json_schema()}} for s in visible
    ]
    assert "finish" in [t["function"]["name"] for t in body["tools"]]
    assert "apply_patch" not in [t["function"]["name"] for t in body["tools"]]  # not allowed for this run


def test_it_caps_replies_with_max_completion_tokens_where_the_server_wants_it() -> None:
    from adapters.openai_adapter import output_limit_field

    assert output_limit_field("https://api.openai.com/v1", "auto") == "max_completion_tokens"  # reasoning models refuse max_tokens
    assert output_limit_field(None, "auto") == "max_completion_tokens"
    assert output_limit_field("http://127.0.0.1:8000/v1", "auto") == "max_tokens"
    assert output_limit_field("https://api.openai.com/v1", "max_tokens") == "max_tokens"
    rig = build_rig([], contract=demo_contract(max_proposals=1))
    with FakeOpenAI(DEMO[:1]) as fake:
        adapter("openai", fake.base_url, rig, output_limit="max_completion_tokens")
        rig.harness.run()
    body = fake.requests[0].body
    assert body["max_completion_tokens"] == 1024 and "max_tokens" not in body


def test_it_drives_the_demo_task_to_completion_with_tool_results_under_matching_ids() -> None:
    rig = build_rig([])
    with FakeOpenAI(DEMO) as fake:
        adapter("openai", fake.base_url, rig, price=Price(0.15, 0.6))
        rig.harness.run()
    assert rig.state.outcome == "complete"
    assert [c.tool for c in rig.executor.calls] == ["read_file", "write_file", "run_check"]
    assert len(fake.requests) == 4
    second = fake.bodies[1]["messages"]
    assert [m["role"] for m in second] == ["system", "user", "assistant", "tool"]
    assert second[2]["tool_calls"][0]["id"] == "call_1"
    assert second[2]["tool_calls"][0]["function"] == {"name": "read_file", "arguments": json.dumps({"path": "src/calc.py"})}
    assert second[3]["tool_call_id"] == "call_1"
    assert "def total(q):" in second[3]["content"] and "<untrusted-data" in second[3]["content"]
    fourth = fake.bodies[3]["messages"]
    assert fourth[-1]["tool_call_id"] == "call_3" and "exit_code: 0" in fourth[-1]["content"]
    assert "not count as evidence" in fourth[-1]["content"]
    usage = [n for n in model_notes(rig) if n["kind"] == "usage"]
    assert [n["request"] for n in usage] == [1, 2, 3, 4]
    assert usage[-1]["total_tokens"] == 4 * 120
    assert usage[-1]["total_cost_usd"] == pytest.approx(4 * (100 * 0.15 + 20 * 0.6) / 1e6)
    assert rig.state.proposer_state["usage"]["input_tokens"] == 400


def test_it_waits_for_approval_and_continues_the_same_conversation_after_a_reload() -> None:
    script = [
        openai_tools(("call_1", "read_file", {"path": "src/calc.py"})),
        # Several calls in one response: proposed one at a time, answered together.
        openai_tools(
            ("call_2", "write_file", {"path": "src/calc.py", "content": FIXED}),
            ("call_3", "run_check", {"check_id": "tests"}),
            ("call_4", "publish", {"message": "reject negative quantities"}),
        ),
        openai_tools(("call_5", "finish", {"summary": "published"})),
    ]
    rig = build_rig([], policy=demo_policy(rules=ASK_PUBLISH))
    with FakeOpenAI(script) as fake:
        adapter("openai", fake.base_url, rig)
        rig.harness.run()
        assert rig.state.status == "waiting_approval"
        assert len(fake.requests) == 2
        assert rig.state.proposer_state["awaiting"]["id"] == "call_4"
        # A new worker: state and conversation from the store, then the reviewer grants.
        reload(rig)
        adapter("openai", fake.base_url, rig)
        rig.harness.run()
        assert rig.state.status == "waiting_approval" and len(fake.requests) == 2  # no model call while waiting
        assert rig.state.waiting is not None
        rig.approvals.grant(rig.state.waiting.approval_key)
        reload(rig)
        adapter("openai", fake.base_url, rig)
        rig.harness.run()
    assert rig.state.outcome == "complete"
    assert rig.executed("publish") == 1
    assert len(fake.requests) == 3
    third = fake.bodies[2]["messages"]
    assert third[: len(fake.bodies[1]["messages"])] == fake.bodies[1]["messages"]  # the same conversation, extended
    tools = [m for m in third if m["role"] == "tool"]
    assert [m["tool_call_id"] for m in tools] == ["call_1", "call_2", "call_3", "call_4"]
    assert "publish ran" in tools[-1]["content"]


def test_it_skips_the_rest_of_a_response_after_a_refused_call() -> None:
    script = [
        openai_tools(
            ("call_1", "finish", {"summary": "done already"}),
            ("call_2", "read_file", {"path": "src/calc.py"}),
        ),
        openai_tools(("call_3", "read_file", {"path": "src/calc.py"})),
    ]
    rig = build_rig([], contract=demo_contract(max_proposals=2))
    with FakeOpenAI(script) as fake:
        adapter("openai", fake.base_url, rig)
        rig.harness.run()
    assert rig.state.proposals == 2 and rig.executed("read_file") == 1
    results = [m for m in fake.bodies[1]["messages"] if m["role"] == "tool"]
    assert [m["tool_call_id"] for m in results] == ["call_1", "call_2"]
    assert "no passing check for: tests" in results[0]["content"]
    assert "skipped" in results[1]["content"]


def test_it_turns_a_text_reply_into_a_refused_proposal_and_tells_the_model_to_call_a_tool() -> None:
    script = [openai_text("I believe the task is complete."), openai_tools(("call_1", "read_file", {"path": "src/calc.py"}))]
    rig = build_rig([], contract=demo_contract(max_proposals=2))
    with FakeOpenAI(script) as fake:
        adapter("openai", fake.base_url, rig)
        rig.harness.run()
    assert rig.feedbacks == []  # the scripted proposer was replaced
    invalid = [e for e in rig.store.events if isinstance(e, ev.InvalidInput)]
    assert invalid[0].gate == "parse" and rig.state.proposals == 2
    second = fake.bodies[1]["messages"]
    assert [m["role"] for m in second] == ["system", "user", "assistant", "user"]
    assert second[2]["content"] == "I believe the task is complete."
    assert "no tool call" in second[3]["content"] and "finish" in second[3]["content"]


def test_it_passes_bad_json_arguments_and_unknown_tools_to_the_gates() -> None:
    script = [
        openai_tools(("call_1", "read_file", '{"path": "src/calc.py"')),
        openai_tools(("call_2", "rm_rf", {"path": "."})),
        openai_tools(("call_3", "read_file", {"path": "src/calc.py"})),
    ]
    rig = build_rig([], contract=demo_contract(max_proposals=3))
    with FakeOpenAI(script) as fake:
        adapter("openai", fake.base_url, rig)
        rig.harness.run()
    proposed = [e.proposal for e in rig.store.events if isinstance(e, ev.Proposed)]
    assert proposed[0] == {"tool": "read_file", "args": '{"path": "src/calc.py"'}
    assert proposed[1] == {"tool": "rm_rf", "args": {"path": "."}}
    gates = [e.gate for e in rig.store.events if isinstance(e, ev.InvalidInput)]
    assert gates == ["parse", "resolve"]
    first_result = fake.bodies[1]["messages"][-1]
    assert first_result["tool_call_id"] == "call_1"
    assert "not valid JSON" in first_result["content"] and "args" in first_result["content"]
    # The malformed arguments are sent back exactly as the model wrote them.
    assert fake.bodies[1]["messages"][2]["tool_calls"][0]["function"]["arguments"] == '{"path": "src/calc.py"'
    assert "unknown tool 'rm_rf'" in fake.bodies[2]["messages"][-1]["content"]
    assert rig.executed("read_file") == 1


def test_it_retries_rate_limits_and_server_errors_with_backoff_as_model_events() -> None:
    script = [openai_error(429, "Rate limit reached", retry_after="2"), openai_error(500, "upstream hiccup"), DEMO[0]]
    rig = build_rig([], contract=demo_contract(max_proposals=1))
    with FakeOpenAI(script) as fake:
        adapter("openai", fake.base_url, rig)
        rig.harness.run()
    assert len(fake.requests) == 3
    assert rig.clock.slept == [2.0, 0.5]  # retry-after honoured, then base 0.25 * 2
    assert rig.executed("read_file") == 1
    notes = model_notes(rig)
    assert [n["kind"] for n in notes] == ["retry", "retry", "usage"]
    assert notes[0]["status"] == 429 and notes[0]["category"] == "rate_limited" and notes[0]["message"] == "Rate limit reached"
    assert notes[1]["status"] == 500 and notes[1]["category"] == "server_error"
    assert all(r.headers["x-stainless-retry-count"] == "0" for r in fake.requests)  # the client's own retries are off


def test_it_stops_model_error_on_401_with_the_providers_message_and_without_retrying() -> None:
    rig = build_rig([])
    with FakeOpenAI([openai_error(401, f"Incorrect API key provided: {API_KEY}.")]) as fake:
        adapter("openai", fake.base_url, rig)
        rig.harness.run()
    assert rig.state.outcome == "model_error"
    assert "openai 401: Incorrect API key provided" in rig.state.stop_message
    assert API_KEY not in rig.state.stop_message and "[redacted]" in rig.state.stop_message
    assert len(fake.requests) == 1 and rig.clock.slept == []
    notes = model_notes(rig)
    assert notes[-1]["kind"] == "error" and notes[-1]["status"] == 401 and notes[-1]["category"] == "auth"
    assert rig.executor.calls == []


def test_it_stops_model_error_when_retries_run_out_or_would_cross_the_deadline() -> None:
    rig = build_rig([])
    with FakeOpenAI([openai_error(500, "down")] * 4) as fake:
        adapter("openai", fake.base_url, rig)
        rig.harness.run()
    assert rig.state.outcome == "model_error" and "gave up after 3 retries" in rig.state.stop_message
    assert len(fake.requests) == 4 and rig.clock.slept == [0.25, 0.5, 1.0]

    late = build_rig([])
    with FakeOpenAI([openai_error(429, "come back tomorrow", retry_after="86400")]) as fake:
        adapter("openai", fake.base_url, late)
        late.harness.run()
    assert late.state.outcome == "model_error" and "would cross the run's deadline" in late.state.stop_message
    assert late.clock.slept == []


def test_it_retries_connection_errors() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    rig = build_rig([])
    adapter("openai", f"http://127.0.0.1:{port}/v1", rig)
    rig.harness.run()
    assert rig.state.outcome == "model_error" and "connection" in rig.state.stop_message
    assert [n["kind"] for n in model_notes(rig)] == ["retry", "retry", "retry", "error"]


def test_it_stops_budget_exhausted_when_the_token_budget_would_be_crossed() -> None:
    script = [openai_tools((f"call_{i}", "read_file", {"path": "src/calc.py"})) for i in range(5)]
    rig = build_rig([])
    with FakeOpenAI(script) as fake:
        adapter("openai", fake.base_url, rig, budget=Budget(max_tokens=300))
        rig.harness.run()
    # 120 tokens a request; the second may only produce 300 - 120 - 100 = 80 tokens;
    # a third would need 100 input tokens on top of 240 used.
    assert [b["max_tokens"] for b in fake.bodies] == [300, 80]
    assert rig.state.outcome == "budget_exhausted"
    assert "token budget exhausted: 240 of 300 tokens used" in rig.state.stop_message
    assert model_notes(rig)[-1]["kind"] == "budget_exhausted"


def test_it_stops_budget_exhausted_when_the_cost_budget_would_be_crossed() -> None:
    script = [openai_tools((f"call_{i}", "read_file", {"path": "src/calc.py"})) for i in range(5)]
    rig = build_rig([])
    with FakeOpenAI(script) as fake:
        # $1000/$2000 per million tokens: a request of 100 in + 20 out costs $0.14.
        adapter("openai", fake.base_url, rig, budget=Budget(max_cost_usd=0.25), price=Price(1000.0, 2000.0))
        rig.harness.run()
    assert len(fake.requests) == 2
    assert fake.bodies[1]["max_tokens"] == 5  # ($0.25 - $0.14 - $0.10 input) buys 5 output tokens
    assert rig.state.outcome == "budget_exhausted" and "cost budget exhausted: $0.2800 of $0.2500" in rig.state.stop_message


def test_it_estimates_usage_when_the_server_reports_none() -> None:
    rig = build_rig([], contract=demo_contract(max_proposals=1))
    with FakeOpenAI([openai_tools(("call_1", "read_file", {"path": "src/calc.py"}), usage=None)]) as fake:
        adapter("openai", fake.base_url, rig)
        rig.harness.run()
    usage = [n for n in model_notes(rig) if n["kind"] == "usage"][0]
    assert usage["estimated"] is True and usage["input_tokens"] > 100
    assert rig.state.proposer_state["usage"]["estimated"] is True


def test_it_continues_a_queue_after_a_crash_without_asking_the_model_again() -> None:

    script = [openai_tools(("call_1", "list_files", {}), ("call_2", "read_file", {"path": "src/calc.py"}))]
    rig = build_rig([])
    with FakeOpenAI(script) as fake:
        first = adapter("openai", fake.base_url, rig)
        assert first.propose(None) == {"tool": "list_files", "args": {}}
        snapshot = first.snapshot()
        assert API_KEY not in json.dumps(snapshot)
        again = adapter("openai", fake.base_url, rig, snapshot=snapshot)
        assert isinstance(again, OpenAIProposer)
        result = fb.Result(call_id="c1", tool="list_files", revision="r1", data={"files": []}, artifacts=[])
        assert again.propose(result) == {"tool": "read_file", "args": {"path": "src/calc.py"}}
    assert len(fake.requests) == 1


# -- configuration and settings ---------------------------------------------------


@pytest.fixture
def model_settings(settings: Settings) -> Settings:
    settings.OPENAI_API_KEY = API_KEY
    settings.OPENAI_ALLOWED_BASE_URLS = ["https://api.openai.com/v1", "http://127.0.0.1:8001/v1"]
    settings.HARNESS_MODEL_MAX_TOKENS = 10_000
    settings.HARNESS_MODEL_MAX_COST_USD = 1.0
    return settings


def model_proposer(proposer: Proposer) -> OpenAIProposer:
    """The model's proposer inside the wrapper that masks what it proposes."""
    from runs.proposers import MaskingProposer

    assert isinstance(proposer, MaskingProposer) and isinstance(proposer.inner, OpenAIProposer)
    return proposer.inner


def test_it_checks_a_model_configuration_naming_each_bad_field(model_settings: Settings) -> None:
    from core.errors import InputError
    from runs.proposers import check_proposer_config

    ok = check_proposer_config({"kind": "openai", "model": "gpt-4o-mini", "base_url": "http://127.0.0.1:8001/v1", "max_tokens": 500})
    assert ok == {"kind": "openai", "model": "gpt-4o-mini", "base_url": "http://127.0.0.1:8001/v1", "max_tokens": 500}
    with pytest.raises(InputError) as caught:
        check_proposer_config(
            {
                "kind": "openai",
                "model": "unpriced-model",
                "api_key": "sk-mine",
                "base_url": "https://evil.example/v1",
                "max_tokens": 0,
                "max_cost_usd": -1,
                "tool_choice": "none",
                "seed": -1,
            }
        )
    fields = {p.field: p.message for p in caught.value.problems}
    assert "integer" in fields["proposer.seed"]
    assert "never from a run" in fields["proposer.api_key"]
    assert "allowed base URLs" in fields["proposer.base_url"]
    assert set(fields) >= {"proposer.max_tokens", "proposer.max_cost_usd", "proposer.tool_choice", "proposer.model"}
    assert "HARNESS_MODEL_PRICES" in fields["proposer.model"]
    assert check_proposer_config({"kind": "openai", "model": "gpt-4o-mini", "seed": 7})["seed"] == 7
    with pytest.raises(InputError, match="only an openai model"):
        check_proposer_config({"kind": "anthropic", "model": "claude-sonnet-4-5", "seed": 7})
    model_settings.OPENAI_API_KEY = ""
    with pytest.raises(InputError, match="OPENAI_API_KEY"):
        check_proposer_config({"kind": "openai", "model": "gpt-4o-mini"})


def test_it_builds_the_adapter_with_the_budget_clipped_by_the_server(model_settings: Settings) -> None:
    from runs.proposers import build_proposer, proposer_usage

    contract = demo_contract()
    tools = builtin_registry().visible(contract.allowed_tools)
    config = {"kind": "openai", "model": "gpt-4o-mini-2024-07-18", "max_tokens": 10**9}
    built = model_proposer(build_proposer(config, {}, contract, tools, deadline=123.0))
    assert isinstance(built, OpenAIProposer)
    assert built.budget == Budget(max_tokens=10_000, max_cost_usd=1.0)  # never more than the server allows
    assert built.price == Price(0.15, 0.6)  # the dated model uses its base model's price
    assert built.deadline == 123.0 and built.base_url == "https://api.openai.com/v1"
    smaller = model_proposer(build_proposer({**config, "max_tokens": 50, "max_cost_usd": 0.5}, {}, contract, tools))
    assert smaller.budget == Budget(max_tokens=50, max_cost_usd=0.5)
    usage = proposer_usage(config, smaller.snapshot())
    assert usage is not None and usage["max_tokens"] == 50
    model_settings.OPENAI_API_KEY = ""  # removed after the run was created: it stops cleanly
    refused = build_proposer(config, {}, contract, tools)
    with pytest.raises(Exception, match="OPENAI_API_KEY"):
        refused.propose(None)


def test_it_reads_the_repository_only_for_a_conversation_not_yet_begun(model_settings: Settings) -> None:
    from core.environment import RepositoryContext
    from runs.proposers import build_proposer

    contract = demo_contract()
    tools = builtin_registry().visible(contract.allowed_tools)
    config = {"kind": "openai", "model": "gpt-4o-mini"}
    reads: list[int] = []

    def repository() -> RepositoryContext:
        reads.append(1)
        return RepositoryContext(instructions="use cents", state="src/calc.py", sources=[("src/calc.py", "def total(q): ...")])

    fresh = model_proposer(build_proposer(config, {}, contract, tools, repository=repository))
    assert reads == [1]
    assert fresh.context.instructions == "use cents" and list(fresh.context.sources) == [("src/calc.py", "def total(q): ...")]
    begun = {**fresh.snapshot(), "messages": [{"role": "user", "content": "the task as first sent"}]}
    resumed = model_proposer(build_proposer(config, begun, contract, tools, repository=repository))
    assert reads == [1]  # the stored messages are the conversation; the workspace is not read again
    assert resumed.messages == begun["messages"]


def test_it_fails_at_start_naming_a_bad_price_table() -> None:
    base = {k: v for k, v in os.environ.items() if k not in ("DJANGO_SETTINGS_MODULE",)}
    for value, named in (("{not json", "not valid JSON"), ('{"m": {"input": -1, "output": 1}}', "non-negative")):
        result = subprocess.run(
            [sys.executable, "-c", "import django, os; os.environ['DJANGO_SETTINGS_MODULE']='harness_site.settings'; django.setup()"],
            capture_output=True,
            text=True,
            env={**base, "DEBUG": "1", "HARNESS_MODEL_PRICES": value},
        )
        assert result.returncode != 0
        assert "HARNESS_MODEL_PRICES" in result.stderr and named in result.stderr


def test_it_summarises_large_outputs_keeping_errors_commands_and_locations_and_the_artifact() -> None:
    noise = [f"collected item {i} ok" for i in range(1500)]
    noise[750:750] = [
        "$ python3 -m pytest -q",
        'File "src/calc.py", line 3, in total',
        "src/calc.py:3: AssertionError: expected ValueError",
        "E   ValueError: -1",
    ]
    log = "\n".join(noise)
    huge = "x" * 70_000
    files = {"src/calc.py": FIXED, "logs/test.log": log, "logs/huge.txt": huge}
    script = [
        openai_tools(("call_1", "read_file", {"path": "logs/test.log"})),
        openai_tools(("call_2", "read_file", {"path": "logs/huge.txt"})),
        openai_tools(("call_3", "list_files", {})),
    ]
    rig = build_rig([], files=files, contract=demo_contract(max_proposals=3))
    with FakeOpenAI(script) as fake:
        adapter("openai", fake.base_url, rig)
        rig.harness.run()
    summary = fake.bodies[1]["messages"][-1]["content"]
    assert len(summary) < 14_000 < len(log)
    assert "[summarised by the harness:" in summary
    for line in noise[750:754]:
        assert line in summary  # exact, with its line number
    assert 'L752: File "src/calc.py", line 3, in total' in summary
    assert "collected item 1499 ok" in summary and "collected item 0 ok" in summary  # first and last lines
    stored = fake.bodies[2]["messages"][-1]["content"]
    assert isinstance(rig.harness.context.artifacts, MemoryArtifacts)
    ref = next(iter(rig.harness.context.artifacts.blobs))  # above max_output_bytes_per_call: stored by the harness
    assert f"Full output stored as artifact(s): {ref}" in stored and "size: " in stored
