"""The cost of one durable step: the harness beside LangGraph doing the same steps
with the same proposer and no-op executor, in memory, on SQLite and on PostgreSQL.

    python bench/loop_overhead.py [--steps N] [--trials T] [--json]

One step is a proposal and its execution. The harness checkpoints twice per step
(the proposal, then the result); the LangGraph graph has a ``propose`` node and an
``execute`` node, so it also checkpoints twice per step, with ``durability="sync"``
(a checkpoint is stored before the next node runs, the guarantee the harness keeps:
intent durable before the effect). Both SQLite variants use WAL with
synchronous=NORMAL, the harness's local-mode setting.

Trials are interleaved (harness, peer, peer, harness, ...) so both see the same
machine; every figure is the median of the trials with its spread (min-max). Each
database variant runs in a child process on a database created for this run under a
unique name and dropped afterwards. Statements per step are counted in an untimed
pass before the trials: every SQL statement the client sent, BEGIN and COMMIT included. The CPU time
per step (this process, all threads) is given beside the wall time because it
hardly changes with the machine's load.

The peers come from bench/requirements.txt, never from the product's requirements."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from machine import load, machine, now  # noqa: E402

PG_ADMIN_URL = os.environ.get("BENCH_PG_URL", "postgres://postgres@127.0.0.1:5432/postgres")
COUNTED_STEPS = 50  # the untimed pass that counts statements


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

        def preview(self, tool: str, args: Any) -> None:
            return None

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


# -- counting statements ---------------------------------------------------------


class Counter:
    def __init__(self) -> None:
        self.statements = 0

    def sqlite(self, connection: sqlite3.Connection) -> None:
        """Every statement SQLite runs on this connection, BEGIN and COMMIT included."""
        connection.set_trace_callback(lambda _sql: self._add(1))

    def _add(self, n: int) -> None:
        self.statements += n


@contextmanager
def counting_django(counter: Counter) -> Iterator[None]:
    """Statements the harness sends through Django. On SQLite the raw connection's
    trace sees everything; on PostgreSQL psycopg sends BEGIN itself and COMMIT is a
    connection call, so each commit adds those two."""
    from django.db import connection

    connection.ensure_connection()
    if connection.vendor == "sqlite":
        counter.sqlite(connection.connection)
        try:
            yield
        finally:
            connection.connection.set_trace_callback(None)
        return

    def wrapper(execute: Callable[..., Any], sql: str, params: Any, many: bool, context: Any) -> Any:
        counter._add(len(params) if many else 1)
        return execute(sql, params, many, context)

    commit = connection.commit

    def counted_commit() -> None:
        counter._add(2)
        commit()

    connection.commit = counted_commit  # type: ignore[method-assign]  # this connection's only, put back below
    try:
        with connection.execute_wrapper(wrapper):
            yield
    finally:
        del connection.commit


def counting_psycopg(conn: Any, counter: Counter) -> None:
    """Statements LangGraph's PostgresSaver sends (autocommit: no BEGIN or COMMIT)."""
    import psycopg

    class CountingCursor(psycopg.Cursor):
        def execute(self, query: Any, params: Any = None, **kwargs: Any) -> Any:
            counter._add(1)
            return super().execute(query, params, **kwargs)

        def executemany(self, query: Any, params_seq: Any, **kwargs: Any) -> Any:
            params_seq = list(params_seq)
            counter._add(len(params_seq))
            return super().executemany(query, params_seq, **kwargs)

    conn.cursor_factory = CountingCursor


# -- one database, in a child process ----------------------------------------------


def database_trials(kind: str, steps: int, trials: int, peer_url: str) -> dict[str, Any]:
    """Runs inside a child process whose DATABASE_URL names a fresh database."""
    import django

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "harness_site.settings")
    django.setup()
    from django.core.management import call_command

    from approvals.policies import current_policy_row
    from core.fences import Lease
    from runs.models import Run
    from runs.store import DjangoStore

    call_command("migrate", verbosity=0)
    policy = current_policy_row()

    def harness(n: int, counter: Counter | None = None) -> float:
        # Driven as a worker drives it: under a lease, every checkpoint fenced by its token.
        run = Run.objects.create(task_id="bench", objective="measure", contract={}, policy=policy, proposer={}, lease_token=1)
        with counting_django(counter) if counter else nullcontext():
            return harness_loop(n, DjangoStore(Lease(1)), str(run.pk))

    with peer_saver(kind, peer_url) as (saver, count_peer):
        # Statements are counted in a pass of their own, outside the timed trials: a
        # counting hook called back from inside the driver would add its own cost,
        # more to the process that also runs a broadcast thread.
        counted = {"harness": Counter(), "langgraph": Counter()}
        with wal_bytes(kind, harness_wal()) as written_by_harness:
            harness(COUNTED_STEPS, counted["harness"])
        with wal_bytes(kind, peer_url if kind == "sqlite" else "", saver) as written_by_peer, count_peer(counted["langgraph"]):
            langgraph_loop(COUNTED_STEPS, saver)
        result = interleaved({"harness": lambda _: harness(steps), "langgraph": lambda _: langgraph_loop(steps, saver)}, trials, steps)
        for name, counter in counted.items():
            result[name]["statements"] = [counter.statements / COUNTED_STEPS]
        for name, written in (("harness", written_by_harness), ("langgraph", written_by_peer)):
            if written:
                result[name]["wal_bytes"] = [written[0] / COUNTED_STEPS]
        return result


def harness_wal() -> str:
    from django.db import connection

    return str(connection.settings_dict["NAME"]) if connection.vendor == "sqlite" else ""


@contextmanager
def wal_bytes(kind: str, path: str, saver: Any = None) -> Iterator[list[int]]:
    """Bytes SQLite appended to the database's write-ahead log meanwhile (whole pages
    and their frame headers: what each commit writes); nothing on PostgreSQL, whose
    WAL is shared with whatever else the server is running."""
    written: list[int] = []
    if kind != "sqlite" or not path:
        yield written
        return

    def pragma(sql: str) -> None:
        if saver is not None:
            saver.conn.execute(sql)
        else:
            from django.db import connection

            with connection.cursor() as cursor:
                cursor.execute(sql)

    # Emptied first, and not checkpointed meanwhile (a checkpoint would start the log
    # over and hide what was written): its growth is every frame written.
    wal = Path(path + "-wal")
    pragma("PRAGMA wal_checkpoint(TRUNCATE)")
    pragma("PRAGMA wal_autocheckpoint=0")
    before = wal.stat().st_size if wal.exists() else 0
    try:
        yield written
        written.append(wal.stat().st_size - before)
    finally:
        pragma("PRAGMA wal_autocheckpoint=1000")


@contextmanager
def peer_saver(kind: str, url: str) -> Iterator[tuple[Any, Callable[[Counter], AbstractContextManager[None]]]]:
    """The peer's checkpointer on a fresh database, and how to count its statements."""
    if kind == "sqlite":
        from langgraph.checkpoint.sqlite import SqliteSaver

        conn = sqlite3.connect(url, check_same_thread=False)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")
        saver = SqliteSaver(conn)
        saver.setup()

        @contextmanager
        def counting(counter: Counter) -> Iterator[None]:
            counter.sqlite(conn)
            try:
                yield
            finally:
                conn.set_trace_callback(None)

        try:
            yield saver, counting
        finally:
            conn.close()
        return
    import psycopg
    from langgraph.checkpoint.postgres import PostgresSaver
    from psycopg.rows import dict_row

    with psycopg.connect(url, autocommit=True, prepare_threshold=0, row_factory=dict_row) as pg_conn:
        pg_saver = PostgresSaver(pg_conn)
        pg_saver.setup()

        @contextmanager
        def counting_pg(counter: Counter) -> Iterator[None]:
            plain = pg_conn.cursor_factory
            counting_psycopg(pg_conn, counter)
            try:
                yield
            finally:
                pg_conn.cursor_factory = plain

        yield pg_saver, counting_pg


def interleaved(variants: dict[str, Callable[[Counter], float]], trials: int, steps: int) -> dict[str, Any]:
    """Each variant ``trials`` times, alternating which goes first."""
    times: dict[str, list[float]] = {name: [] for name in variants}
    cpu: dict[str, list[float]] = {name: [] for name in variants}
    statements: dict[str, list[float]] = {name: [] for name in variants}
    order = list(variants)
    for trial in range(trials):
        for name in order if trial % 2 == 0 else reversed(order):
            counter = Counter()
            # CPU time of this process (all its threads): unlike the wall time it
            # hardly moves with the machine's load; the database server's is not in it.
            started = time.process_time()
            times[name].append(variants[name](counter))
            cpu[name].append((time.process_time() - started) / steps)
            statements[name].append(counter.statements / steps)
    return {name: {"seconds": times[name], "cpu": cpu[name], "statements": statements[name]} for name in variants}


def child(kind: str, url: str, peer_url: str, steps: int, trials: int) -> dict[str, Any]:
    var = tempfile.mkdtemp(prefix="bench-loop-")
    # DEBUG off, as deployed: with DEBUG on Django keeps a log of every query and, on
    # SQLite, runs one more statement per statement to render it.
    env = {**os.environ, "DEBUG": "0", "SECRET_KEY": uuid.uuid4().hex + uuid.uuid4().hex, "DATABASE_URL": url, "HARNESS_VAR_DIR": var}
    command = [sys.executable, __file__, "--child", kind, peer_url, "--steps", str(steps), "--trials", str(trials)]
    try:
        out = subprocess.run(command, env=env, capture_output=True, text=True, check=True).stdout
    finally:
        shutil.rmtree(var, ignore_errors=True)
    result: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    return result


@contextmanager
def sqlite_databases() -> Iterator[tuple[str, str]]:
    folder = Path(tempfile.mkdtemp(prefix="bench-loop-"))
    try:
        yield f"sqlite:///{folder / 'harness.sqlite3'}", str(folder / "langgraph.sqlite3")
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@contextmanager
def postgres_databases() -> Iterator[tuple[str, str] | None]:
    """Two databases with names unique to this run, dropped afterwards."""
    import psycopg

    names = [f"bench_{uuid.uuid4().hex[:12]}_{role}" for role in ("harness", "langgraph")]
    base = PG_ADMIN_URL.rsplit("/", 1)[0]
    try:
        with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:
            for name in names:
                conn.execute(f'CREATE DATABASE "{name}"')
    except psycopg.Error as exc:
        print(f"PostgreSQL unavailable ({exc}); skipping that row", file=sys.stderr)
        yield None
        return
    try:
        yield f"{base}/{names[0]}", f"{base}/{names[1]}"
    finally:
        with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:
            for name in names:
                conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


# -- the report ---------------------------------------------------------------------


def summary(trials: dict[str, list[float]]) -> dict[str, Any]:
    us = [s * 1e6 for s in trials["seconds"]]
    return {
        "us_per_step": round(statistics.median(us), 1),
        "min": round(min(us), 1),
        "max": round(max(us), 1),
        "cpu_us_per_step": round(statistics.median(trials["cpu"]) * 1e6, 1),
        "statements_per_step": round(statistics.median(trials["statements"]), 2),
        "wal_bytes_per_step": round(statistics.median(trials["wal_bytes"])) if trials.get("wal_bytes") else "",
    }


def in_memory_trials(steps: int, trials: int) -> dict[str, Any]:
    from langgraph.checkpoint.memory import InMemorySaver

    from core.simulated import MemoryStore

    variants: dict[str, Callable[[Counter], float]] = {
        "empty": lambda _: empty_loop(steps),
        "harness": lambda _: harness_loop(steps, MemoryStore(verify=False), "bench"),
        "langgraph": lambda _: langgraph_loop(steps, InMemorySaver()),
    }
    return interleaved(variants, trials, steps)


def measure(steps: int, db_steps: int, trials: int) -> dict[str, Any]:
    result: dict[str, Any] = {
        "date": now(),
        "machine": machine(),
        "load_before": load(),
        "steps": steps,
        "db_steps": db_steps,
        "trials": trials,
    }
    memory = in_memory_trials(steps, trials)
    base = statistics.median(memory["empty"]["seconds"])
    result["in memory"] = {
        "empty loop": summary(memory["empty"]),
        "harness": summary(memory["harness"]),
        "langgraph (InMemorySaver)": summary(memory["langgraph"]),
        "harness / empty loop": round(statistics.median(memory["harness"]["seconds"]) / base, 1),
    }
    result["in memory"]["harness / langgraph"] = ratio(memory)
    with sqlite_databases() as (harness_url, peer_path):
        result["sqlite"] = database_row(child("sqlite", harness_url, peer_path, db_steps, trials), "SqliteSaver")
    with postgres_databases() as urls:
        if urls:
            result["postgresql"] = database_row(child("postgresql", urls[0], urls[1], db_steps, trials), "PostgresSaver")
    result["load_after"] = load()
    return result


def ratio(trials: dict[str, Any]) -> float:
    """Median of the per-trial ratios: each pair ran back to back."""
    pairs = zip(trials["harness"]["seconds"], trials["langgraph"]["seconds"], strict=True)
    median: float = statistics.median(h / p for h, p in pairs)
    return round(median, 2)


def database_row(trials: dict[str, Any], saver: str) -> dict[str, Any]:
    cpu = statistics.median(h / p for h, p in zip(trials["harness"]["cpu"], trials["langgraph"]["cpu"], strict=True))
    return {
        "harness": summary(trials["harness"]),
        f"langgraph ({saver})": summary(trials["langgraph"]),
        "harness / langgraph": ratio(trials),
        "harness / langgraph, CPU": round(cpu, 2),
    }


def table(result: dict[str, Any]) -> str:
    lines = [
        f"Durable step cost, {result['date']}, {result['machine']}, load {result['load_before']} -> {result['load_after']}",
        f"{result['steps']} steps in memory, {result['db_steps']} on a database, median of {result['trials']} interleaved trials (min-max)",
        "",
        f"{'where':12} {'variant':30} {'µs/step':>9} {'min-max':>17} {'CPU µs/step':>12} {'statements/step':>16} {'WAL bytes/step':>15}",
    ]
    for where in ("in memory", "sqlite", "postgresql"):
        for name, row in result.get(where, {}).items():
            if isinstance(row, dict):
                spread = f"{row['min']}-{row['max']}"
                lines.append(
                    f"{where:12} {name:30} {row['us_per_step']:>9} {spread:>17} {row['cpu_us_per_step']:>12} {row['statements_per_step']:>16}"
                    f" {row['wal_bytes_per_step']:>15}"
                )
            else:
                lines.append(f"{where:12} {name:30} {row:>9}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=2000, help="steps per in-memory trial (a quarter of it, at least 50, on a database)")
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--child", nargs=2, metavar=("KIND", "PEER_URL"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    # A terminated bench still drops the databases it created (their finally runs on SystemExit).
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    if args.child:
        kind, peer_url = args.child
        print(json.dumps(database_trials(kind, args.steps, args.trials, peer_url)))
        return
    result = measure(args.steps, max(50, args.steps // 4), args.trials)
    print(json.dumps(result) if args.json else table(result))


if __name__ == "__main__":
    main()
