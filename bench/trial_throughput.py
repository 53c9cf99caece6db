"""Trial throughput (issue 42): runs per minute for a trial of ``--runs`` repetitions
against the same runs started one by one, on one and on two worker hosts.

The machinery is bench/host_throughput.py's, imported: its database made for the run,
its Redis queues, and its hosts (each a Celery worker process of its own name,
HARNESS_WORKER_HOST, with its own data directory; host A runs the beat; host B shares
the machine's Docker engine). This process is the web process.

The run is the demo's (examples/demo/contract.json on examples/orders, its scripted
proposer: read, patch, the tests in the sandbox, publish after approval, finish).

- **A trial**: one variant, that proposer, k = ``--runs``, its requests decided by a
  rule (grant all) through the workers' ``trials.review`` task, this process looking
  as ``manage.py trial run`` does (``tend``, ``review_waiting``) until the trial is done.
- **One by one**: the same ``--runs`` runs, each created by ``runs.runtime.create_run``
  as an operator's form would (all at once, no trial), each publish granted by a
  reviewer here as soon as it is asked.

A round ends when its last run has stopped; runs per minute = runs / (last stop -
the round's start, before the first run is created). Rounds interleave: per repetition
(``--rounds``), with one host a trial then one by one, then host B started and the
same with two hosts (the order of trial and one by one alternating between
repetitions), B stopped after. Each started worker first drives one run of its own,
not counted.

    python bench/trial_throughput.py [--runs 30] [--rounds 2] [--concurrency 2] [--json]

Everything it started goes at the end, also on failure (host_throughput's cleanup)."""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import host_throughput as hosts  # noqa: E402  (sets this process's environment: the web's)
from bench.machine import load, machine, now  # noqa: E402

TRIAL_TIMEOUT = 600


def trial_round(hosts_up: list[hosts.Host], n: int, operator: Any, contract: dict[str, Any], script: dict[str, Any]) -> dict[str, Any]:
    from trials.models import Trial
    from trials.service import create_trial, review_waiting, runs_of, tend

    started = time.time()
    trial = create_trial(
        task={"name": "demo", "contract": contract},
        variants=[{"name": "demo", "proposer": script, "reviewer": {"kind": "rule", "decision": "grant"}}],
        k=n,
        actor=operator,
        name="trial throughput",
    )
    deadline = time.monotonic() + TRIAL_TIMEOUT
    while tend(trial).status == Trial.Status.RUNNING:
        if time.monotonic() > deadline or any(h.proc is None or h.proc.poll() is not None for h in hosts_up):
            logs = "\n".join(h.log()[-2000:] for h in hosts_up)
            raise SystemExit(f"the trial was not done after {TRIAL_TIMEOUT} s or a worker died\n{logs}")
        review_waiting(trial)
        time.sleep(0.2)
    ids = list(runs_of(trial).values_list("pk", flat=True))
    return measure("trial", hosts_up, started, ids)


def one_by_one_round(
    hosts_up: list[hosts.Host], n: int, operator: Any, reviewer: Any, contract: dict[str, Any], script: dict[str, Any]
) -> dict[str, Any]:
    from runs.runtime import create_run

    started = time.time()
    runs = [create_run(contract, script, operator) for _ in range(n)]
    hosts.drive(runs, reviewer, hosts_up)
    return measure("one by one", hosts_up, started, [run.pk for run in runs])


def measure(how: str, hosts_up: list[hosts.Host], started: float, ids: list[Any]) -> dict[str, Any]:
    from runs.models import Event, Run

    outcomes = Counter(Run.objects.filter(pk__in=ids).values_list("outcome", flat=True))
    if set(outcomes) != {"complete"}:
        raise SystemExit(f"{how}: runs did not complete: {dict(outcomes)}")
    ended = {e.run_id: e.ts.timestamp() for e in Event.objects.filter(run_id__in=ids, type="stopped")}
    created = {run.pk: run.created_at.timestamp() for run in Run.objects.filter(pk__in=ids)}
    elapsed = max(ended.values()) - started
    return {
        "how": how,
        "hosts": len(hosts_up),
        "runs": len(ids),
        "seconds": round(elapsed, 2),
        "runs_per_minute": round(len(ids) * 60 / elapsed, 1),
        "run_seconds_median": round(statistics.median(ended[i] - created[i] for i in ids), 2),
        "runs_by_host": dict(sorted(Counter(Run.objects.filter(pk__in=ids).values_list("host", flat=True)).items())),
        "load": load(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=30, help="runs per round: the trial's k, and as many one by one")
    parser.add_argument("--rounds", type=int, default=2, help="repetitions of the four rounds, interleaved")
    parser.add_argument("--concurrency", type=int, default=os.cpu_count() or 2, help="worker processes per host")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    import django

    hosts.create_database()
    started: list[hosts.Host] = []
    rounds: list[dict[str, Any]] = []
    try:
        django.setup()
        from django.core.management import call_command

        call_command("migrate", verbosity=0)
        operator, reviewer = hosts.users()
        contract = json.loads((ROOT / "examples/demo/contract.json").read_text())
        script = {"kind": "scripted", "script": json.loads((ROOT / "examples/demo/proposals.json").read_text())}
        a = hosts.Host("host-a", args.concurrency, beat=True)
        b = hosts.Host("host-b", args.concurrency)
        started = [a, b]
        load_before = load()
        a.start()
        hosts.warm_up(a, operator, reviewer, contract, script)
        for repetition in range(args.rounds):
            for up in ([a], [a, b]):
                if b in up:
                    b.start()
                    hosts.warm_up(b, operator, reviewer, contract, script)
                pair = [
                    lambda up=up: trial_round(up, args.runs, operator, contract, script),
                    lambda up=up: one_by_one_round(up, args.runs, operator, reviewer, contract, script),
                ]
                for measure_round in pair if repetition % 2 == 0 else reversed(pair):
                    rounds.append(measure_round())
                if b in up:
                    b.stop()
        load_after = load()
    finally:
        for host in started:
            host.stop()
        hosts.cleanup(None)

    def median(how: str, n_hosts: int) -> float:
        return float(statistics.median(r["runs_per_minute"] for r in rounds if r["how"] == how and r["hosts"] == n_hosts))

    figures = {f"{how}, {n} host{'s' if n > 1 else ''}": median(how, n) for n in (1, 2) for how in ("trial", "one by one")}
    result = {
        "date": now(),
        "machine": machine(),
        "load_before": load_before,
        "load_after": load_after,
        "runs_per_round": args.runs,
        "concurrency_per_host": args.concurrency,
        "runs_per_minute": figures,
        "trial_vs_one_by_one": {n: round(median("trial", n) / median("one by one", n), 2) for n in (1, 2)},
        "rounds": rounds,
    }
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print(f"trial throughput, {result['date']}, {result['machine']}; load {load_before} before, {load_after} after")
    print(f"the demo run, {args.runs} runs per round, {args.concurrency} worker processes per host, both hosts on the machine's engine")
    for r in rounds:
        print(
            f"  {r['how']:10} {r['hosts']} host{'s' if r['hosts'] > 1 else ' '}: {r['runs_per_minute']:6.1f} runs/min "
            f"({r['seconds']:.1f} s), a run {r['run_seconds_median']:.1f} s median, by host {r['runs_by_host']}, load {r['load']}"
        )
    for name, value in figures.items():
        print(f"{name:22} {value:6.1f} runs/min (median of {args.rounds})")
    for n, ratio in result["trial_vs_one_by_one"].items():
        print(f"trial / one by one, {n} host{'s' if n > 1 else ''}: {ratio:.2f}")


if __name__ == "__main__":
    main()
