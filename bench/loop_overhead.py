"""The cost of one durable step: the harness beside LangGraph doing the same steps
with the same proposer and no-op executor, in memory, on SQLite and on PostgreSQL.

    python bench/loop_overhead.py [--steps N] [--trials T] [--callgrind N] [--json]
    python bench/loop_overhead.py --profile N [--sort cumulative|tottime|calls]

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

``--callgrind N`` adds the figure load does not change: the instructions per durable
step of each side on each database, counted by valgrind's callgrind around the steps
only (bench/instructions.py), in one child per database under callgrind on the
database the trials used: each side's run of 2N steps less its run of N, over N, so
what a run costs once (its row, the graph's compilation, the first and last
checkpoint) is no part of a step's figure. The broadcasts each commit queues are
sent before the step goes on (the harness's broadcasting thread is counted, as every
thread is: ``sent_at_each_commit``), after the same sequence run short and unmeasured
(every first use made); two identical runs agree within 1%.
Counts are of this process only: what the PostgreSQL server does is the statements'.

The peers come from bench/requirements.txt, never from the product's requirements."""

from __future__ import annotations

import argparse
import functools
import gc
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from machine import child_env, load, machine, now  # noqa: E402

from bench.instructions import available, measured, parts  # noqa: E402
from bench.loop_databases import Counter, counting_django, harness_wal, peer_saver, postgres_databases, sqlite_databases, wal_bytes  # noqa: E402
from bench.loop_variants import empty_loop, harness_loop, langgraph_loop  # noqa: E402

COUNTED_STEPS = 50  # the untimed pass that counts statements


# -- one database, in a child process ----------------------------------------------


def harness_steps(migrate: bool = True) -> Callable[..., float]:
    """The harness's steps on the child's database: ``harness(n, counter=None)``. Runs
    inside a child process whose DATABASE_URL names a fresh database (``migrate``: not
    migrated yet)."""
    import django

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "harness_site.settings")
    django.setup()
    from django.core.management import call_command

    from approvals.policies import current_policy_row
    from core.fences import Lease
    from runs.models import Run
    from runs.persistence.store import DjangoStore

    if migrate:
        call_command("migrate", verbosity=0)
    policy = current_policy_row()

    def harness(n: int, counter: Counter | None = None) -> float:
        # Driven as a worker drives it: under a lease, every checkpoint fenced by its token.
        run = Run.objects.create(task_id="bench", objective="measure", contract={}, policy=policy, proposer={}, lease_token=1)
        with counting_django(counter) if counter else nullcontext():
            return harness_loop(n, DjangoStore(Lease(1)), str(run.pk))

    return harness


def database_trials(kind: str, steps: int, trials: int, peer_url: str) -> dict[str, Any]:
    harness = harness_steps()
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


SIDES = ("harness", "langgraph")


def sent_at_each_commit() -> None:
    """Each commit's broadcasts sent before the run goes on, in a process whose
    instructions are counted. The broadcasting thread sends a round, then sleeps
    ``ROUND_SECONDS`` of wall time before the next (runs.persistence.broadcast): under
    valgrind, tens of times slower, how many commits fall into one round is the wall
    clock's doing, and the counts of two identical runs moved by 5%. Sent at each
    commit, every commit's doorbell is a round of its own, the most this thread can
    cost a step."""
    import runs.persistence.eventlog as eventlog
    from runs.persistence.broadcast import flush_broadcasts, ring_doorbell

    def ring_and_send(run_id: str, last_seq: int) -> None:
        ring_doorbell(run_id, last_seq)
        flush_broadcasts()

    setattr(eventlog, "ring_doorbell", ring_and_send)  # noqa: B010 - a module's name, patched for the count


def wal_emptied(*peers: Any) -> None:
    """The SQLite write-ahead logs (the harness's, and the peers' connections given)
    copied into their databases and emptied, before a counted part: a log that reaches
    a thousand pages is copied back by the commit that finds it so (tens of millions
    of instructions), in whichever part that commit falls, and a part of 2N steps
    then counted less than its part of N. Each part now starts from an empty log: up
    to about 30 steps a part (some 16 pages a step) no copy falls inside it, and beyond
    that the copies fall at the same steps in every run. Nothing on PostgreSQL."""
    from django.db import connection

    if connection.vendor == "sqlite":
        with connection.cursor() as cursor:
            cursor.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    for conn in peers:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")


def instruction_parts(kind: str, peer_url: str, n: int) -> None:
    """What callgrind runs: for each side ``n`` and ``2n`` steps, each a measured part
    (bench/instructions.py), after the same sequence of 2 steps, counted and dropped. Each part
    starts from a collected heap and no broadcast pending, and ends once its own
    broadcasts are sent."""
    from runs.persistence.broadcast import flush_broadcasts

    harness = harness_steps(migrate=False)  # the trials' child did
    sent_at_each_commit()
    with peer_saver(kind, peer_url) as (saver, _):
        sides: dict[str, Callable[[int], float]] = {"harness": harness, "langgraph": lambda k: langgraph_loop(k, saver)}

        def steps(side: str, k: int) -> None:
            sides[side](k)
            flush_broadcasts()

        for counts in ((2,), (n, 2 * n)):
            for side in SIDES:
                for k in counts:
                    flush_broadcasts()
                    wal_emptied(*([saver.conn] if kind == "sqlite" else []))
                    gc.collect()
                    measured(functools.partial(steps, side, k))


def profile(n: int, sort: str) -> None:
    """Where the harness's SQLite steps go: cProfile over ``n`` steps after 20 unprofiled,
    the 45 functions first by ``sort`` (calls per step are exact; the times are
    the profiler's, and move with the load)."""
    import cProfile
    import pstats

    from runs.persistence.broadcast import flush_broadcasts

    harness = harness_steps()
    harness(20)
    flush_broadcasts()
    profiler = cProfile.Profile()
    profiler.runcall(harness, n)
    pstats.Stats(profiler).sort_stats(sort).print_stats(45)


def instructions(kind: str, url: str, peer_url: str, n: int) -> dict[str, int]:
    """Instructions per step of each side: (2n steps less n) over n."""
    with child_process_env(url) as env:
        # The short sequence's parts, one per side, are counted and dropped: a child's
        # first counted part carried some 18 M instructions more than the same part
        # counted later, whatever it held (history, 2026-12-06 22:37).
        counts = iter(parts([__file__, "--instructions", kind, peer_url, str(n)], 3 * len(SIDES), env=env)[len(SIDES) :])
    found = {}
    for side in SIDES:
        single, double = next(counts), next(counts)
        found[side] = round((double - single) / n)
    return found


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


@contextmanager
def child_process_env(url: str) -> Iterator[dict[str, str]]:
    """A child's environment on the database ``url``, with a variable directory of its
    own, removed afterwards."""
    var = tempfile.mkdtemp(prefix="bench-loop-")
    # No fold check after each checkpoint (the test suite's setting, should the environment carry it).
    try:
        yield child_env(var, url, HARNESS_VERIFY_FOLD="0")
    finally:
        shutil.rmtree(var, ignore_errors=True)


def child(kind: str, url: str, peer_url: str, steps: int, trials: int, callgrind: int) -> dict[str, Any]:
    command = [sys.executable, __file__, "--child", kind, peer_url, "--steps", str(steps), "--trials", str(trials)]
    with child_process_env(url) as env:
        out = subprocess.run(command, env=env, capture_output=True, text=True, check=True).stdout
    result: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    if callgrind:
        for side, count in instructions(kind, url, peer_url, callgrind).items():
            result[side]["instructions"] = count
    return result


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
        "instructions_per_step": trials.get("instructions", ""),
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


def measure(steps: int, db_steps: int, trials: int, callgrind: int) -> dict[str, Any]:
    result: dict[str, Any] = {
        "date": now(),
        "machine": machine(),
        "load_before": load(),
        "steps": steps,
        "db_steps": db_steps,
        "trials": trials,
        "callgrind_steps": callgrind,
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
        result["sqlite"] = database_row(child("sqlite", harness_url, peer_path, db_steps, trials, callgrind), "SqliteSaver")
    with postgres_databases() as urls:
        if urls:
            result["postgresql"] = database_row(child("postgresql", urls[0], urls[1], db_steps, trials, callgrind), "PostgresSaver")
    result["load_after"] = load()
    return result


def ratio(trials: dict[str, Any]) -> float:
    """Median of the per-trial ratios: each pair ran back to back."""
    pairs = zip(trials["harness"]["seconds"], trials["langgraph"]["seconds"], strict=True)
    median: float = statistics.median(h / p for h, p in pairs)
    return round(median, 2)


def database_row(trials: dict[str, Any], saver: str) -> dict[str, Any]:
    cpu = statistics.median(h / p for h, p in zip(trials["harness"]["cpu"], trials["langgraph"]["cpu"], strict=True))
    row: dict[str, Any] = {"harness": summary(trials["harness"]), f"langgraph ({saver})": summary(trials["langgraph"])}
    if "instructions" in trials["harness"]:
        row["harness / langgraph, instructions"] = round(trials["harness"]["instructions"] / trials["langgraph"]["instructions"], 3)
    row["harness / langgraph"] = ratio(trials)
    row["harness / langgraph, CPU"] = round(cpu, 2)
    return row


def table(result: dict[str, Any]) -> str:
    lines = [
        f"Durable step cost, {result['date']}, {result['machine']}, load {result['load_before']} -> {result['load_after']}",
        f"{result['steps']} steps in memory, {result['db_steps']} on a database, median of {result['trials']} interleaved trials (min-max);"
        f" instructions: callgrind, {result['callgrind_steps'] or 'not counted'} steps",
        "",
        f"{'where':12} {'variant':34} {'instructions/step':>17} {'µs/step':>9} {'min-max':>17} {'CPU µs/step':>12} {'statements/step':>16}"
        f" {'WAL bytes/step':>15}",
    ]
    for where in ("in memory", "sqlite", "postgresql"):
        for name, row in result.get(where, {}).items():
            if isinstance(row, dict):
                spread = f"{row['min']}-{row['max']}"
                lines.append(
                    f"{where:12} {name:34} {row.get('instructions_per_step', ''):>17} {row['us_per_step']:>9} {spread:>17}"
                    f" {row['cpu_us_per_step']:>12} {row['statements_per_step']:>16} {row['wal_bytes_per_step']:>15}"
                )
            elif name.endswith("instructions"):
                lines.append(f"{where:12} {name:34} {row:>17}")
            else:
                lines.append(f"{where:12} {name:34} {'':>17} {row:>9}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=2000, help="steps per in-memory trial (a quarter of it, at least 50, on a database)")
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--callgrind", type=int, default=0, metavar="N", help="also count instructions per step over N steps (valgrind)")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--child", nargs=2, metavar=("KIND", "PEER_URL"), help=argparse.SUPPRESS)
    parser.add_argument("--instructions", nargs=3, metavar=("KIND", "PEER_URL", "N"), help=argparse.SUPPRESS)
    parser.add_argument("--profile", type=int, default=0, metavar="N", help="only profile N harness steps on SQLite (cProfile)")
    parser.add_argument("--sort", default="cumulative", help="the profile's order (pstats: cumulative, tottime, calls)")
    parser.add_argument("--profile-child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    # A terminated bench still drops the databases it created (their finally runs on SystemExit).
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    if args.child:
        kind, peer_url = args.child
        print(json.dumps(database_trials(kind, args.steps, args.trials, peer_url)))
        return
    if args.profile_child:
        profile(args.profile, args.sort)
        return
    if args.profile:
        with sqlite_databases() as (url, _), child_process_env(url) as env:
            command = [sys.executable, __file__, "--profile-child", "--profile", str(args.profile), "--sort", args.sort]
            subprocess.run(command, env=env, check=True)
        return
    if args.instructions:
        kind, peer_url, n = args.instructions
        instruction_parts(kind, peer_url, int(n))
        return
    if args.callgrind and not available():
        raise SystemExit("--callgrind needs valgrind (scripts/setup.sh installs it)")
    result = measure(args.steps, max(50, args.steps // 4), args.trials, args.callgrind)
    print(json.dumps(result) if args.json else table(result))


if __name__ == "__main__":
    main()
