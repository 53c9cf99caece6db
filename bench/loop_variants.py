"""The loops bench/loop_overhead.py compares, each doing the same no-op steps with the
same proposer and executor: an empty loop (the floor), the harness and LangGraph.
Each returns the seconds per step."""

from __future__ import annotations

import time
import uuid
from typing import TYPE_CHECKING, Any, TypedDict


def noop_parts(steps: int) -> tuple[Any, Any, Any, Any]:
    from core.contract import Contract, Limits
    from core.policy import Policy, Rule
    from core.scripted import ScriptedProposer

    proposal = {"tool": "read_file", "args": {"path": "src/calc.py"}}

    class NoopExecutor:
        def execute(self, call: Any) -> dict[str, Any]:
            return {
                "call_id": call.call_id,
                "tool": call.tool,
                "status": "ok",
                "effect": "none",
                "revision": "r0",
                "data": {},
                "artifacts": [],
            }

        def reconcile(self, effect: Any) -> Any:
            raise AssertionError("nothing is pending")

    class FixedWorkspace:
        def revision(self) -> str:
            return "r0"

        def verify(self) -> str:
            return "r0"

        def picked_up(self) -> str:
            return "r0"

        def preview(self, tool: str, args: Any) -> None:
            return None

        def sources(self, tool: str, args: Any) -> dict[str, str]:
            return {}

        def plan(self, tool: str, args: Any, idempotency_key: str, at: float) -> None:
            return None

    limits = Limits(max_proposals=steps, max_tool_calls=steps, max_attempts=1, wall_time_seconds=3600, max_output_bytes_per_call=65536)
    policy = Policy(version=1, rules=[Rule(name="all", tool="*", decision="allow")], checks=[], budget=limits)
    contract = Contract(
        task_id="bench",
        objective="measure",
        acceptance_criteria=["numbers"],
        workspace={"kind": "path", "path": "."},  # type: ignore[arg-type]  # pydantic validates it into a WorkspaceSource
        allowed_write_paths=[],
        allowed_tools=["read_file"],
        verification_targets=["tests"],
        limits=limits,
    )
    proposer = ScriptedProposer(lambda feedback, position: proposal if position < steps else None)
    return contract, policy, proposer, (NoopExecutor(), FixedWorkspace())


def empty_loop(steps: int) -> float:
    """Baseline: the same proposer and executor, with nothing in between."""
    from core.ports import Call

    _, _, proposer, (executor, _) = noop_parts(steps)
    start = time.perf_counter()
    feedback = None
    for n in range(steps):
        raw = proposer.propose(feedback)
        call = Call("bench", f"c{n}", raw["tool"], "1", raw["args"], 1, None, 65536)
        feedback = executor.execute(call)
    return (time.perf_counter() - start) / steps


def harness_loop(steps: int, store: Any, run_id: str) -> float:
    from core.loop import Harness, new_state
    from core.simulated import MemoryApprovals, MemoryArtifacts
    from core.tools import builtin_registry

    contract, policy, proposer, (executor, workspace) = noop_parts(steps)
    state = new_state(run_id=run_id, contract=contract, policy=policy, actor="bench", revision="r0", now=time.time())
    harness = Harness(
        state,
        registry=builtin_registry(),
        policy=policy,
        proposer=proposer,
        executor=executor,
        workspace=workspace,
        approvals=MemoryApprovals(),
        store=store,
        artifacts=MemoryArtifacts(),
    )
    start = time.perf_counter()
    harness.run()
    elapsed = time.perf_counter() - start
    assert state.proposals == steps, state.outcome
    return elapsed / steps


if TYPE_CHECKING:
    from langchain_core.runnables import RunnableConfig


class GraphState(TypedDict):
    proposal: dict[str, Any] | None
    feedback: dict[str, Any] | None
    steps: int


def langgraph_loop(steps: int, checkpointer: Any) -> float:
    """LangGraph doing what the harness does per step: ask the proposer, execute."""
    from langgraph.graph import END, START, StateGraph

    from core.ports import Call

    _, _, proposer, (executor, _) = noop_parts(steps)

    def propose(state: GraphState) -> dict[str, Any]:
        return {"proposal": proposer.propose(state["feedback"]), "steps": state["steps"] + 1}

    def execute(state: GraphState) -> dict[str, Any]:
        raw = state["proposal"] or {}
        call = Call("bench", f"c{state['steps']}", raw["tool"], "1", raw["args"], 1, None, 65536)
        return {"feedback": executor.execute(call)}

    graph = StateGraph(GraphState)
    graph.add_node("propose", propose)
    graph.add_node("execute", execute)
    graph.add_edge(START, "propose")
    graph.add_edge("propose", "execute")
    graph.add_conditional_edges("execute", lambda state: "propose" if state["steps"] < steps else END)
    app = graph.compile(checkpointer=checkpointer)
    config: RunnableConfig = {"configurable": {"thread_id": uuid.uuid4().hex}, "recursion_limit": 2 * steps + 10}
    start = time.perf_counter()
    final = app.invoke({"proposal": None, "feedback": None, "steps": 0}, config, durability="sync")
    elapsed = time.perf_counter() - start
    assert final["steps"] == steps, final
    return elapsed / steps
