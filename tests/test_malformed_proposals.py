"""Malformed proposals generated with Hypothesis: whatever a model sends, the loop
neither crashes nor lets an invalid call reach the executor, and every proposal is
counted."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from core.scenarios import build_rig, call

JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=30),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=12,
)
TOOLS = st.sampled_from(["read_file", "write_file", "list_files", "search", "run_check", "publish", "finish", "rm", ""])
ARGS = st.dictionaries(
    st.sampled_from(["path", "content", "offset", "limit", "pattern", "check_id", "message", "x"]), JSON_VALUES, max_size=4
)
PROPOSALS = st.one_of(
    JSON_VALUES,
    st.builds(lambda tool, args: {"tool": tool, "args": args}, TOOLS, ARGS),
    st.builds(
        lambda tool, args, extra: {"tool": tool, "args": args, **extra},
        TOOLS,
        ARGS,
        st.dictionaries(st.text(max_size=5), JSON_VALUES, max_size=2),
    ),
)


@pytest.mark.slow  # property-based: 300 generated proposal lists
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(PROPOSALS, min_size=1, max_size=6))
def test_it_survives_any_proposal_and_only_valid_calls_reach_the_executor(proposals: list[object]) -> None:
    script = [*proposals, call("read_file", path="src/calc.py")]
    rig = build_rig(script)
    rig.harness.run()
    state = rig.state
    assert state.status in ("stopped", "complete", "waiting_approval")
    assert state.proposals <= len(script)
    assert len([e for e in rig.store.events if e.model_dump()["type"] == "proposed"]) == state.proposals
    registry_tools = {"list_files", "read_file", "search", "write_file", "run_check", "publish", "lookup_publish"}
    for executed in rig.executor.calls:
        assert executed.tool in registry_tools
        path = executed.args.get("path")
        if path is not None:
            assert not str(path).startswith("/") and ".." not in str(path).split("/")
        if executed.tool == "write_file":
            assert str(executed.args["path"]).startswith("src/")
    seqs = [e.seq for e in rig.store.events]
    assert seqs == list(range(1, len(seqs) + 1))
