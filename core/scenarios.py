"""The runtime's contract scenarios: one per control, each with the outcome the
control guarantees. ``harness_selftest`` runs them against the real gate set; the
tests run them too, and again with a gate set that has the control switched off
(ablation)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from core import events as ev
from core.contract import Contract, Limits
from core.faults import Fault, FaultyExecutor
from core.feedback import Feedback, InvalidInput
from core.gates import Gates
from core.loop import GATES, Harness, HarnessConfig, new_state
from core.policy import CheckDef, Policy, Rule
from core.scripted import ScriptedProposer
from core.simulated import FakeClock, MemoryApprovals, MemoryArtifacts, MemoryStore, SimExecutor, SimWorkspace
from core.state import RunState
from core.tools import builtin_registry


def demo_policy(version: int = 1, rules: Sequence[Rule] | None = None) -> Policy:
    return Policy(
        version=version,
        rules=list(
            rules
            if rules is not None
            else [
                Rule(name="reads", tool="*", decision="allow", when={}),
            ]
        ),
        checks=[CheckDef(check_id="tests", command=["python3", "-m", "pytest", "-q"], version="1", timeout_seconds=60)],
        budget=Limits(max_proposals=50, max_tool_calls=50, max_attempts=3, wall_time_seconds=600, max_output_bytes_per_call=65536),
    )


def demo_contract(**limits: int) -> Contract:
    base = dict(max_proposals=20, max_tool_calls=20, max_attempts=3, wall_time_seconds=300, max_output_bytes_per_call=65536)
    base.update(limits)
    return Contract(
        task_id="selftest",
        objective="exercise one control",
        acceptance_criteria=["the control holds"],
        workspace={"kind": "path", "path": "."},  # type: ignore[arg-type]
        allowed_write_paths=["src/*"],
        allowed_tools=["list_files", "read_file", "search", "write_file", "run_check", "publish", "lookup_publish"],
        verification_targets=["tests"],
        limits=Limits(**base),
    )


@dataclass
class Rig:
    """One simulated run: every part inspectable after it ran."""

    state: RunState
    harness: Harness
    executor: SimExecutor
    store: MemoryStore
    approvals: MemoryApprovals
    clock: FakeClock
    feedbacks: list[Feedback | None] = field(default_factory=list)

    def executed(self, tool: str) -> int:
        return sum(1 for c in self.executor.calls if c.tool == tool)

    def event_types(self) -> list[str]:
        return [ev.type_name(type(e)) for e in self.store.events]


def build_rig(
    script: Sequence[object],
    *,
    gates: Gates = GATES,
    policy: Policy | None = None,
    contract: Contract | None = None,
    faults: Sequence[Fault] = (),
    files: dict[str, str] | None = None,
    check_passes: Callable[[object, str], bool] | None = None,
    lookup_authoritative: bool = True,
) -> Rig:
    policy = policy or demo_policy()
    contract = contract or demo_contract()
    workspace = SimWorkspace(files if files is not None else {"src/calc.py": "def total(q):\n    return q\n"})
    executor = SimExecutor(workspace, lookup_authoritative=lookup_authoritative)
    if check_passes is not None:
        executor.check_passes = check_passes
    registry = builtin_registry()
    wrapped = FaultyExecutor(
        executor,
        list(faults),
        workspace.revision,
        lambda tool: bool((spec := registry.get(tool)) and spec.has_effect),
    )
    clock = FakeClock()
    store = MemoryStore()
    approvals = MemoryApprovals()
    feedbacks: list[Feedback | None] = []
    steps = list(script)

    def scripted(feedback: Feedback | None, position: int) -> object | None:
        feedbacks.append(feedback)
        return steps[position] if position < len(steps) else None

    state = new_state(
        run_id="run-selftest", contract=contract, policy=policy, actor="tester", revision=workspace.revision(), now=clock.now()
    )
    harness = Harness(
        state,
        registry=registry,
        policy=policy,
        proposer=ScriptedProposer(scripted),
        executor=wrapped,
        workspace=workspace,
        approvals=approvals,
        store=store,
        artifacts=MemoryArtifacts(),
        clock=clock,
        config=HarnessConfig(retry_base_seconds=0.5),
        gates=gates,
    )
    return Rig(state, harness, executor, store, approvals, clock, feedbacks)


def call(tool: str, **args: object) -> dict[str, object]:
    return {"tool": tool, "args": args}


FIXED = "def total(q):\n    if q < 0:\n        raise ValueError(q)\n    return q\n"


@dataclass(frozen=True)
class Scenario:
    control: str
    run: Callable[[Gates], tuple[bool, str]]


def denied_tool(gates: Gates) -> tuple[bool, str]:
    policy = demo_policy(rules=[Rule(name="no publishing", tool="publish", decision="deny"), Rule(name="rest", tool="*", decision="allow")])
    rig = build_rig([call("publish", message="ship it")], gates=gates, policy=policy)
    rig.harness.run()
    ok = rig.state.outcome == "tool_denied" and rig.executed("publish") == 0
    return ok, f"outcome={rig.state.outcome}, publish executions={rig.executed('publish')}"


def stale_check(gates: Gates) -> tuple[bool, str]:
    script = [
        call("write_file", path="src/calc.py", content=FIXED),
        call("run_check", check_id="tests"),
        call("write_file", path="src/calc.py", content=FIXED + "# later edit\n"),
        call("finish", summary="done"),
    ]
    rig = build_rig(script, gates=gates)
    rig.harness.run()
    ok = rig.state.outcome != "complete" and ev.type_name(ev.CheckRequired) in rig.event_types()
    return ok, f"outcome={rig.state.outcome}"


def exhausted_budget(gates: Gates) -> tuple[bool, str]:
    script = [call("read_file", path="src/calc.py")] * 6
    rig = build_rig(script, gates=gates, contract=demo_contract(max_proposals=3))
    rig.harness.run()
    ok = rig.state.outcome == "budget_exhausted" and rig.state.proposals == 3
    return ok, f"outcome={rig.state.outcome}, proposals={rig.state.proposals}"


def inconsistent_receipt(gates: Gates) -> tuple[bool, str]:
    script = [call("read_file", path="src/calc.py"), call("read_file", path="src/calc.py")]
    rig = build_rig(script, gates=gates, faults=[Fault("read_file", "invalid_receipt", 1)])
    rig.harness.run()
    ok = rig.state.outcome == "receipt_invalid" and rig.executed("read_file") == 1
    return ok, f"outcome={rig.state.outcome}, read executions={rig.executed('read_file')}"


def unknown_write(gates: Gates) -> tuple[bool, str]:
    script = [
        call("write_file", path="src/calc.py", content=FIXED),
        call("run_check", check_id="tests"),
        call("publish", message="fix negative quantities"),
        call("write_file", path="src/calc.py", content=FIXED + "# more\n"),
        call("finish", summary="done"),
    ]
    rig = build_rig(script, gates=gates, faults=[Fault("publish", "timeout", 1)], lookup_authoritative=False)
    rig.harness.run()
    writes = rig.executed("write_file")
    ok = rig.state.outcome == "unresolved" and writes == 1 and ev.type_name(ev.WriteBlocked) in rig.event_types()
    return ok, f"outcome={rig.state.outcome}, write executions={writes}"


def transient_retry(gates: Gates) -> tuple[bool, str]:
    retried = build_rig([call("read_file", path="src/calc.py")], gates=gates, faults=[Fault("read_file", "transient", 2)])
    retried.harness.run()
    exhausted = build_rig([call("read_file", path="src/calc.py")], gates=gates, faults=[Fault("read_file", "transient", 10)])
    exhausted.harness.run()
    first = retried.store.ledger["c1"]
    ok = (
        first.state == "completed"
        and retried.state.calls == 3
        and exhausted.state.outcome == "attempt_limit"
        and exhausted.state.calls == 3
    )
    return (
        ok,
        f"retried: {first.state} after {retried.state.calls} calls; endless transient: {exhausted.state.outcome} after {exhausted.state.calls} calls",
    )


def failing_sandbox(gates: Gates) -> tuple[bool, str]:
    script = [call("write_file", path="src/calc.py", content=FIXED), call("run_check", check_id="tests"), call("finish", summary="done")]
    recovered = build_rig(script, gates=gates, faults=[Fault("run_check", "infrastructure", 1)])
    recovered.harness.run()
    down = build_rig(script, gates=gates, faults=[Fault("run_check", "infrastructure", 10)])
    down.harness.run()
    ok = recovered.state.outcome == "complete" and down.state.outcome == "sandbox_unavailable" and down.state.evidence == []
    return ok, f"sandbox back: {recovered.state.outcome}; sandbox down: {down.state.outcome}, evidence {len(down.state.evidence)}"


def invalid_argument(gates: Gates) -> tuple[bool, str]:
    rig = build_rig([call("read_file", path="../../etc/passwd"), call("read_file", path="src/calc.py")], gates=gates)
    rig.harness.run()
    paths = [c.args.get("path") for c in rig.executor.calls]
    fed_back = any(isinstance(f, InvalidInput) for f in rig.feedbacks)
    ok = fed_back and paths == ["src/calc.py"] and rig.state.proposals == 2
    return ok, f"feedback invalid_input={fed_back}, executed paths={paths}"


def repeated_effect(gates: Gates) -> tuple[bool, str]:
    script = [
        call("write_file", path="src/calc.py", content=FIXED),
        call("run_check", check_id="tests"),
        call("publish", message="fix negative quantities"),
        call("publish", message="fix negative quantities"),
    ]
    rig = build_rig(script, gates=gates)
    rig.harness.run()
    publishes = rig.executed("publish")
    ok = publishes == 1 and ev.type_name(ev.DuplicateEffect) in rig.event_types()
    return ok, f"publish executions={publishes}, effects applied={rig.state.effects_applied}"


SCENARIOS: tuple[Scenario, ...] = (
    Scenario("a denied tool never reaches the executor", denied_tool),
    Scenario("a stale check cannot complete a run", stale_check),
    Scenario("an exhausted budget stops the run", exhausted_budget),
    Scenario("an inconsistent receipt stops the run", inconsistent_receipt),
    Scenario("an unknown write blocks further writes and completion", unknown_write),
    Scenario("a transient failure is retried within limits", transient_retry),
    Scenario("an invalid argument is returned to the proposer", invalid_argument),
    Scenario("a failing sandbox is retried, never evidence, and stops the run by name", failing_sandbox),
    Scenario("the same effect proposed again is performed once", repeated_effect),
)


def run_scenarios(gates: Gates = GATES) -> list[tuple[str, bool, str]]:
    results = []
    for scenario in SCENARIOS:
        try:
            ok, detail = scenario.run(gates)
        except Exception as exc:  # noqa: BLE001 - a crashing control is a failing control, reported as such
            ok, detail = False, f"crashed: {type(exc).__name__}: {exc}"
        results.append((scenario.control, ok, detail))
    return results
