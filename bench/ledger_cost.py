"""What the decision ledger costs a durable step and a grant (docs/design.md, Decision
ledger; goal: under 5% of a step), on SQLite and on PostgreSQL.

    python bench/ledger_cost.py [--steps N] [--grants G] [--trials T] [--callgrind] [--json]

The step is bench/loop_overhead.py's (the harness's loop through the Django store,
under a lease, a no-op executor, a policy that allows every call): each step's
admission is a gate's decision, one ledger entry. The grant is a reviewer's decision
on a pending request as ``runs.approval_flow.flow`` records it (the request's
conditional UPDATE, what the page shows, the ``approval_decided`` event) without the
access checks before it, so the ledger's share of it is, if anything, overstated.
"Off" is the same code with the ledger's calls made no-ops (the entries of a
stored batch, ``runs.persistence.eventlog.record_decisions``, which also decides
the entry joined to the checkpoint's statement on PostgreSQL: off, none is, and the
checkpoint takes the same path as on, its statement alone; and keeping what a reviewer
was shown, ``runs.approval_flow.flow.keep``).

Counted, which load does not change: the statements each step and grant sends (a
pass of its own), and with ``--callgrind N`` the instructions per step and per grant
under valgrind's callgrind, counted around the measured part only
(bench/instructions.py), in one child per database on a database prepared
beforehand: each variant's run of 2N steps less its run of N, over N, so that what a
run costs once (its row, its first and last checkpoint, a first use) is no part of a
step's figure; grants likewise. Timed: CPU time of this
process per step and per grant, the variants interleaved (off, on, then on, off) in
one process; the ratios to "off" are the figures to compare."""

from __future__ import annotations

import argparse
import functools
import gc
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from machine import load, machine, now  # noqa: E402

from bench.instructions import measured, parts  # noqa: E402
from bench.loop_databases import PG_ADMIN_URL, Counter, counting_django  # noqa: E402
from bench.loop_overhead import child_process_env, sent_at_each_commit, wal_emptied  # noqa: E402
from bench.loop_variants import harness_loop  # noqa: E402

VARIANTS = ("off", "on")
COUNTED = 20  # steps and grants of the untimed counting pass
# The callgrind child's parts of the short sequence run first (steps and grants, each
# variant): counted and dropped. A child's first counted part carried some 18 M
# instructions more than the same part counted later, whatever it held (history,
# 2026-12-06 22:37).
WARM = 2


# -- inside a child process, on a prepared database -----------------------------------


def setup() -> None:
    import django

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "harness_site.settings")
    django.setup()


class Bench:
    """Steps and grants, with the ledger on or off."""

    def __init__(self) -> None:
        from django.contrib.auth.models import User

        from approvals.policies import current_policy_row

        self.policy = current_policy_row()
        self.user, _ = User.objects.get_or_create(username="bench-reviewer")

    def switch(self, variant: str) -> None:
        import runs.approval_flow.flow as flow
        import runs.persistence.eventlog as eventlog
        from ledger.writer import keep
        from runs.persistence.decisions import record_decisions

        on = variant == "on"
        setattr(eventlog, "record_decisions", record_decisions if on else (lambda run_id, rows, events, connection=None: None))  # noqa: B010 - a module's name, patched for the bench
        setattr(flow, "keep", keep if on else (lambda shown: None))  # noqa: B010

    def run(self) -> Any:
        from runs.models import Run

        return Run.objects.create(task_id="bench", objective="measure", contract={}, policy=self.policy, proposer={}, lease_token=1)

    def steps(self, n: int) -> None:
        from core.fences import Lease
        from runs.persistence.store import DjangoStore

        if n:
            harness_loop(n, DjangoStore(Lease(1)), str(self.run().pk))

    def pending(self, n: int) -> list[Any]:
        """``n`` pending requests of a run that stored one step (its state is a run's)."""
        from datetime import timedelta

        from django.utils import timezone

        from approvals.models import ApprovalRequest
        from core.fences import Lease
        from runs.persistence.store import DjangoStore

        run = self.run()
        harness_loop(1, DjangoStore(Lease(1)), str(run.pk))
        expires = timezone.now() + timedelta(days=1)
        return [
            ApprovalRequest.objects.create(
                run=run,
                call_id=f"c{k}",
                tool="write_file",
                args={"path": "src/calc.py", "content": "print(1)\n"},
                revision="r0",
                policy_version=self.policy.version,
                key=uuid.uuid4().hex,
                rule="writes need review",
                diff="--- a/src/calc.py\n+++ b/src/calc.py\n@@ -1 +1 @@\n-print(0)\n+print(1)\n",
                expires_at=expires,
            )
            for k in range(n)
        ]

    def grants(self, requests: list[Any]) -> None:
        from runs.approval_flow.flow import _decide

        for request in requests:
            _decide(request, self.user, "granted", "", 1)


def prepare() -> None:
    """Migrate, and one step and one grant with the ledger on: the chains' heads exist."""
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    bench = Bench()
    bench.switch("on")
    bench.steps(1)
    bench.grants(bench.pending(1))


def once(n: int, parts: tuple[str, ...] = ("steps", "grants")) -> None:
    """The callgrind child: for each variant ``n`` and ``2n`` steps, then ``n`` and
    ``2n`` grants (``parts``: the steps alone for a count that fits a busy machine's
    minutes, ``--once-steps``), each a measured part (bench/instructions.py), after the same sequence
    short (every first use made), counted too and dropped by the parent (``WARM``). Each part starts from a collected heap and no
    broadcast pending, and ends once its own broadcasts are sent: the broadcasting
    thread's work (counted, as every thread's is) would otherwise fall into whichever
    part was running when it woke."""
    from runs.persistence.broadcast import flush_broadcasts

    def counted(work: Any) -> None:
        work()
        flush_broadcasts()

    sent_at_each_commit()
    bench = Bench()
    for counts in ((2,), (n, 2 * n)):
        for what in parts:
            for variant in VARIANTS:
                bench.switch(variant)
                for count in counts:
                    work = (
                        functools.partial(bench.steps, count) if what == "steps" else functools.partial(bench.grants, bench.pending(count))
                    )
                    flush_broadcasts()
                    wal_emptied()
                    gc.collect()
                    measured(functools.partial(counted, work))


def trials(steps: int, grants: int, count: int) -> dict[str, Any]:
    bench = Bench()
    result: dict[str, Any] = {v: {"step_cpu": [], "grant_cpu": [], "step_wall": [], "grant_wall": []} for v in VARIANTS}

    def measure(variant: str) -> None:
        bench.switch(variant)
        requests = bench.pending(grants)
        wall, cpu = time.perf_counter(), time.process_time()
        bench.steps(steps)
        result[variant]["step_cpu"].append((time.process_time() - cpu) / steps)
        result[variant]["step_wall"].append((time.perf_counter() - wall) / steps)
        wall, cpu = time.perf_counter(), time.process_time()
        bench.grants(requests)
        result[variant]["grant_cpu"].append((time.process_time() - cpu) / grants)
        result[variant]["grant_wall"].append((time.perf_counter() - wall) / grants)

    for variant in VARIANTS:  # warm-up
        bench.switch(variant)
        bench.steps(5)
        bench.grants(bench.pending(2))
    for trial in range(count):
        for variant in VARIANTS if trial % 2 == 0 else reversed(VARIANTS):
            measure(variant)
    for variant in VARIANTS:
        bench.switch(variant)
        requests = bench.pending(COUNTED)
        counter = Counter()
        with counting_django(counter):
            bench.steps(COUNTED)
        result[variant]["step_statements"] = counter.statements / COUNTED
        counter = Counter()
        with counting_django(counter):
            bench.grants(requests)
        result[variant]["grant_statements"] = counter.statements / COUNTED
    return result


# -- the parent ----------------------------------------------------------------------


@contextmanager
def database(kind: str) -> Iterator[str]:
    """A fresh database of ``kind``, dropped afterwards."""
    if kind == "sqlite":
        folder = Path(tempfile.mkdtemp(prefix="bench-ledger-"))
        try:
            yield f"sqlite:///{folder / 'harness.sqlite3'}"
        finally:
            shutil.rmtree(folder, ignore_errors=True)
        return
    import psycopg

    name = f"bench_ledger_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield f"{PG_ADMIN_URL.rsplit('/', 1)[0]}/{name}"
    finally:
        with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def child(url: str, *args: str) -> str:
    with child_process_env(url) as env:
        return subprocess.run([sys.executable, __file__, *args], env=env, capture_output=True, text=True, check=True).stdout


def instructions(url: str, n: int) -> dict[str, dict[str, float]]:
    """Instructions per step and per grant of each variant: (2n less n) over n."""
    with child_process_env(url) as env:
        # The short sequence's parts (the first two of each) are counted and dropped (``WARM``).
        counts = iter(parts([__file__, "--once", str(n)], 6 * len(VARIANTS), env=env)[WARM * len(VARIANTS) :])
    found: dict[str, dict[str, float]] = {variant: {} for variant in VARIANTS}
    for what in ("step", "grant"):
        for variant in VARIANTS:
            single, double = next(counts), next(counts)
            found[variant][f"{what}_instructions"] = (double - single) / n
    return found


def measure_database(kind: str, steps: int, grants: int, count: int, callgrind: int) -> dict[str, Any]:
    with database(kind) as url:
        child(url, "--prepare")
        out = child(url, "--trials", str(count), "--steps", str(steps), "--grants", str(grants), "--child")
        result: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
        if callgrind:
            for variant, figures in instructions(url, callgrind).items():
                result[variant].update(figures)
    return result


def summary(measured: dict[str, Any]) -> dict[str, Any]:
    rows: dict[str, Any] = {}
    for what in ("step", "grant"):
        row: dict[str, Any] = {}
        for variant in VARIANTS:
            figures = measured[variant]
            row[variant] = {
                "cpu_us": round(statistics.median(figures[f"{what}_cpu"]) * 1e6, 1),
                "wall_us": round(statistics.median(figures[f"{what}_wall"]) * 1e6, 1),
                "statements": figures[f"{what}_statements"],
                "instructions": round(figures.get(f"{what}_instructions", 0)),
            }
        off, on = measured["off"], measured["on"]
        # Paired: each trial's on against the same trial's off.
        row["cpu_ratio"] = round(statistics.median(b / a for a, b in zip(off[f"{what}_cpu"], on[f"{what}_cpu"], strict=True)), 3)
        row["wall_ratio"] = round(statistics.median(b / a for a, b in zip(off[f"{what}_wall"], on[f"{what}_wall"], strict=True)), 3)
        if row["off"]["instructions"]:
            row["instruction_ratio"] = round(row["on"]["instructions"] / row["off"]["instructions"], 4)
        rows[what] = row
    return rows


def table(result: dict[str, Any]) -> str:
    lines = [
        "| database | what | statements off / on | instructions off / on (ratio) | CPU µs off / on (ratio) | wall ratio |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for kind, rows in result["databases"].items():
        for what, row in rows.items():
            off, on = row["off"], row["on"]
            lines.append(
                f"| {kind} | {what} | {off['statements']:.2f} / {on['statements']:.2f} | {off['instructions']:,} / {on['instructions']:,}"
                f" ({row.get('instruction_ratio', '-')}) | {off['cpu_us']} / {on['cpu_us']} ({row['cpu_ratio']}) | {row['wall_ratio']} |"
            )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--grants", type=int, default=40)
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--callgrind", type=int, default=0, metavar="N", help="also count instructions over N steps and N grants")
    parser.add_argument("--databases", default="sqlite,postgresql")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--prepare", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--once", type=int, metavar="N", help=argparse.SUPPRESS)
    parser.add_argument("--once-steps", type=int, metavar="N", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.prepare or args.child or args.once is not None or args.once_steps is not None:
        setup()
        if args.prepare:
            prepare()
        elif args.once is not None:
            once(args.once)
        elif args.once_steps is not None:
            once(args.once_steps, ("steps",))
        else:
            print(json.dumps(trials(args.steps, args.grants, args.trials)))
        return
    started = now()
    before = load()
    result = {
        "machine": machine(),
        "when": started,
        "load": [before, load()],
        "command": " ".join(["python3", "bench/ledger_cost.py", *sys.argv[1:]]),
        "databases": {
            kind: summary(measure_database(kind, args.steps, args.grants, args.trials, args.callgrind))
            for kind in args.databases.split(",")
        },
    }
    result["load"][1] = load()
    print(json.dumps(result, indent=2) if args.json else table(result))


if __name__ == "__main__":
    main()
