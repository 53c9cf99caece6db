"""Model answers Harness cannot read (issue 39, finding 7): tool arguments nested
5,000 levels deep (Python's parser gives up with RecursionError), nested deeper than
a stored value may be, or larger than a proposal may be. Each, from either provider's
wire format through its official client, becomes one refused proposal whose feedback
tells the model its arguments were not valid JSON; the run goes on to its next answer."""

from __future__ import annotations

import json

import pytest

from adapters.calls import UNREAD_REPLY
from core import events as ev
from core import storable
from core.proposals import MAX_PROPOSAL_BYTES
from core.scenarios import build_rig, demo_contract
from tests.fake_providers import FakeAnthropic, FakeOpenAI, Reply, adapter, anthropic_tools, openai_tools

DEEP = 5000


def nested(depth: int) -> str:
    return '{"path": ' + "[" * depth + "]" * depth + "}"


READ = ("call_2", "read_file", {"path": "src/calc.py"})
SHAPES = {
    "recursion": (nested(DEEP), "nested more than"),
    "depth": (nested(storable.MAX_DEPTH + 10), "nested more than"),
    "size": (json.dumps({"path": "x" * (MAX_PROPOSAL_BYTES + 10)}), "at most"),
}


def refused_then_read(rig: object, feedback: str, said: str) -> None:
    invalid = [e for e in rig.store.events if isinstance(e, ev.InvalidInput)]  # type: ignore[attr-defined]
    assert [e.gate for e in invalid] == ["parse"]
    assert rig.state.proposals == 2  # type: ignore[attr-defined]
    assert "not valid JSON" in feedback and said in feedback
    assert rig.executed("read_file") == 1  # type: ignore[attr-defined]


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_it_feeds_back_unreadable_openai_arguments_as_not_valid_json(shape: str) -> None:
    arguments, said = SHAPES[shape]
    rig = build_rig([], contract=demo_contract(max_proposals=2))
    with FakeOpenAI([openai_tools(("call_1", "read_file", arguments)), openai_tools(READ)]) as fake:
        adapter("openai", fake.base_url, rig)
        rig.harness.run()
    assert len(fake.requests) == 2
    result = fake.bodies[1]["messages"][-1]
    assert result["tool_call_id"] == "call_1"
    refused_then_read(rig, result["content"], said)


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_it_feeds_back_unreadable_anthropic_input_as_not_valid_json(shape: str) -> None:
    arguments, said = SHAPES[shape]
    # The input spliced in as text: Python's encoder would not write the deep one.
    template = anthropic_tools(("toolu_1", "read_file", {"placeholder": 1}))
    raw = json.dumps(template.body).replace('{"placeholder": 1}', arguments).encode()
    rig = build_rig([], contract=demo_contract(max_proposals=2))
    read = anthropic_tools(("toolu_2", "read_file", {"path": "src/calc.py"}))
    with FakeAnthropic([Reply(200, {}, raw=raw), read]) as fake:
        adapter("anthropic", fake.base_url, rig)
        rig.harness.run()
    assert len(fake.requests) == 2
    result = fake.bodies[1]["messages"][-1]
    if shape == "recursion":
        # The client itself could not parse the answer: no tool call id to answer to.
        assert fake.bodies[1]["messages"][-2] == {"role": "assistant", "content": UNREAD_REPLY}
        assert result["content"].startswith("[harness] Your last reply was not valid JSON")
        refused_then_read(rig, result["content"], said)
    else:
        (result,) = result["content"]
        assert result["tool_use_id"] == "toolu_1"
        assert fake.bodies[1]["messages"][-2]["content"][0]["input"] == {}
        refused_then_read(rig, result["content"], said)
