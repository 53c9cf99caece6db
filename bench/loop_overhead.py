"""The harness core's cost per step with a no-op executor: in memory, and with
database checkpoints on SQLite and PostgreSQL, as ratios to an empty loop that
only asks the proposer and calls the executor.

    python bench/loop_overhead.py [--steps N] [--json]

Each database variant runs in its own process on a fresh database."""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

PG_ADMIN_URL = os.environ.get("BENCH_PG_URL", "postgres://postgres@127.0.0.1:5432/postgres")


def noop_parts(steps: int) -> tuple[Any, Any, Any, Any]:
    from runs.core.contract import Contract, Limits
    from runs.core.policy import Policy, Rule
    from runs.core.scripted import ScriptedProposer

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

        def preview(self, tool: str, args: Any) -> None:
            return None

    limits = Limits(max_proposals=steps, max_tool_calls=steps, max_attempts=1, wall_time_seconds=3600, max_output_bytes_per_call=65536)
    policy = Policy(version=1, rules=[Rule(name="all", tool="*", decision="allow")], checks=[], budget=limits)
    contract = Contract(
        task_id="bench",
        objective="measure",
        acceptance_criteria=["numbers"],
        workspace={"kind": "path", "path": "."},  # type: ignore[arg-type]
        allowed_write_paths=[],
        allowed_tools=["read_file"],
        verification_targets=["tests"],
        limits=limits,
    )
    proposer = ScriptedProposer(lambda feedback, position: proposal if position < steps else None)
    return contract, policy, proposer, (NoopExecutor(), FixedWorkspace())


def empty_loop(steps: int) -> float:
    """Baseline: the same proposer and executor, with no harness in between."""
    from runs.core.ports import Call

    _, _, proposer, (executor, _) = noop_parts(steps)
    start = time.perf_counter()
    feedback = None
    for n in range(steps):
        raw = proposer.propose(feedback)
        call = Call("bench", f"c{n}", raw["tool"], "1", raw["args"], 1, None, 65536)
        feedback = executor.execute(call)
    return (time.perf_counter() - start) / steps


def harness_loop(steps: int, store: Any, run_id: str) -> float:
    from runs.core.loop import Harness, new_state
    from runs.core.simulated import MemoryApprovals, MemoryArtifacts
    from runs.core.tools import builtin_registry

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


def in_memory(steps: int) -> float:
    from runs.core.simulated import MemoryStore

    return harness_loop(steps, MemoryStore(), "bench")


def with_database(steps: int) -> float:
    """Runs inside a child process whose DATABASE_URL names a fresh database."""
    import django

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "harness_site.settings")
    django.setup()
    from django.core.management import call_command

    from approvals.policies import current_policy_row
    from runs.models import Run
    from runs.store import DjangoStore

    call_command("migrate", verbosity=0)
    run = Run.objects.create(task_id="bench", objective="measure", contract={}, policy=current_policy_row(), proposer={})
    return harness_loop(steps, DjangoStore(), str(run.pk))


def child(url: str, steps: int) -> float:
    env = {**os.environ, "DEBUG": "1", "DATABASE_URL": url, "HARNESS_VAR_DIR": tempfile.mkdtemp(prefix="bench-")}
    out = subprocess.run(
        [sys.executable, __file__, "--child", "--steps", str(steps)], env=env, capture_output=True, text=True, check=True
    ).stdout
    return float(out.strip().splitlines()[-1])


def postgres_url() -> str | None:
    import psycopg

    try:
        with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:
            conn.execute("DROP DATABASE IF EXISTS harness_bench")
            conn.execute("CREATE DATABASE harness_bench")
    except psycopg.Error as exc:
        print(f"PostgreSQL unavailable ({exc}); skipping that row", file=sys.stderr)
        return None
    return PG_ADMIN_URL.rsplit("/", 1)[0] + "/harness_bench"


def median_of(fn: Any, repeats: int) -> float:
    return statistics.median(fn() for _ in range(repeats))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(with_database(args.steps))
        return
    db_steps = max(50, args.steps // 10)
    rows = {"empty loop": median_of(lambda: empty_loop(args.steps), 5), "harness, in memory": median_of(lambda: in_memory(args.steps), 5)}
    sqlite_path = Path(tempfile.mkdtemp(prefix="bench-")) / "bench.sqlite3"
    rows["harness, SQLite checkpoints"] = child(f"sqlite:///{sqlite_path}", db_steps)
    pg = postgres_url()
    if pg:
        rows["harness, PostgreSQL checkpoints"] = child(pg, db_steps)
    base = rows["empty loop"]
    result = {name: {"us_per_step": round(value * 1e6, 2), "ratio_to_empty": round(value / base, 1)} for name, value in rows.items()}
    if args.json:
        print(json.dumps(result))
        return
    print(f"{'variant':34} {'µs/step':>10} {'× empty loop':>13}")
    for name, row in result.items():
        print(f"{name:34} {row['us_per_step']:>10} {row['ratio_to_empty']:>13}")


if __name__ == "__main__":
    main()
