"""Runs per minute with one and with two worker hosts (issue 28), measured in one run.

Each host is a Celery worker process of its own name (HARNESS_WORKER_HOST), with its
own data directory (workspaces, spool), consuming the shared queue and its host's
own; host A also runs the installation's one beat. This process is the web process,
with a data directory of its own: it creates the runs (stored and queued, nothing
prepared) and grants each publish as a reviewer as soon as it is asked. Both hosts
use the machine's Docker engine, or with ``--engine`` host B a dockerd of its own
(tests/two_hosts.py; needs root). One PostgreSQL database made for the run, one Redis.

The run is the demo's: examples/demo/contract.json on examples/orders with its
scripted proposer (read, patch, the tests in the sandbox, publish after approval,
finish). A round creates ``--runs`` runs at once and ends when the last one has
stopped; runs per minute = runs / (last stop - first creation). Rounds with one host
(host A) and with two (A and B) alternate, B started before its rounds and stopped
after; each started worker first drives one run of its own that is not counted.

    python bench/host_throughput.py [--runs 20] [--rounds 3] [--concurrency 2] [--engine] [--json]

Everything it started goes at the end, also on failure: the workers, host B's engine,
run containers of its scope, its database, its Redis queues and its directories."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.celery_worker import start_worker  # noqa: E402
from bench.machine import load, machine, now  # noqa: E402

PG_ADMIN_URL = os.environ.get("BENCH_PG_URL", "postgres://postgres@127.0.0.1:5432/postgres")
TAG = f"bench-hosts-{uuid.uuid4().hex[:8]}"
DATABASE = TAG.replace("-", "_")
VAR = Path(tempfile.mkdtemp(prefix=f"{TAG}-"))
ENV = {
    **os.environ,
    "DEBUG": "1",
    "DJANGO_SETTINGS_MODULE": "harness_site.settings",
    "DATABASE_URL": f"{PG_ADMIN_URL.rsplit('/', 1)[0]}/{DATABASE}",
    "HARNESS_QUEUE": TAG,
    "HARNESS_SANDBOX_SCOPE": TAG,
    "HARNESS_CHANNEL_PREFIX": TAG,
    "PYTHONUNBUFFERED": "1",
}
# The web process's own data directory: no run's workspace may ever be made there.
os.environ.update({**ENV, "HARNESS_VAR_DIR": str(VAR / "web"), "HARNESS_WORKER_HOST": "web"})
RUN_TIMEOUT = 300


class Host:
    """A worker host: a Celery worker named ``name`` with its own data directory."""

    def __init__(self, name: str, concurrency: int, beat: bool = False, docker_host: str | None = None) -> None:
        self.name = name
        self.concurrency = concurrency
        self.beat = beat
        self.root = VAR / name
        self.env = {
            **ENV,
            "HARNESS_WORKER_HOST": name,
            "HARNESS_VAR_DIR": str(self.root / "data"),
            "HARNESS_WORKSPACE_ROOT": str(self.root / "data" / "workspaces"),
            "HARNESS_SPOOL_DIR": str(self.root / "data" / "spool"),
            **({"DOCKER_HOST": docker_host} if docker_host else {}),
        }
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0

    def start(self) -> None:
        from runs.models import WorkerHost

        self.root.mkdir(parents=True, exist_ok=True)
        self.starts += 1
        extra = ["-n", f"{self.name}@%h"]
        if self.beat:
            extra += ["-B", "-s", str(self.root / "beat-schedule")]
        started = time.time()
        self.proc = start_worker(TAG, self.concurrency, self.env, self.log_path(), extra)
        # Ready once its heartbeat (started when the worker is ready) is newer than its start.
        deadline = time.monotonic() + 120
        while not WorkerHost.objects.filter(name=self.name, seen_at__gte=from_timestamp(started)).exists():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"worker {self.name} did not start:\n{self.log()[-3000:]}")
            time.sleep(0.1)

    def stop(self) -> None:
        """A warm shutdown (SIGTERM), as a host going down for maintenance."""
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(30)

    def log_path(self) -> Path:
        return self.root / f"worker-{self.starts}.log"

    def log(self) -> str:
        return "\n".join(p.read_text(errors="replace") for p in sorted(self.root.glob("worker-*.log")))


def from_timestamp(seconds: float) -> Any:
    from datetime import UTC, datetime

    return datetime.fromtimestamp(seconds, UTC)


def create_database() -> None:
    import psycopg

    with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{DATABASE}"')


def drop_database() -> None:
    import psycopg
    from django.db import connections

    connections.close_all()
    with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{DATABASE}" WITH (FORCE)')


def purge_redis() -> None:
    """This run's queues (the shared one and the hosts'), their bindings and any
    message of theirs taken but not acknowledged."""
    import redis
    from django.conf import settings

    client = redis.Redis.from_url(settings.REDIS_URL)
    keys = [*client.scan_iter(f"{TAG}*"), *client.scan_iter(f"_kombu.binding*.{TAG}*")]
    if keys:
        client.delete(*keys)
    for tag, raw in client.hscan_iter("unacked"):
        if str(json.loads(raw)[2]).startswith(TAG):
            client.hdel("unacked", tag)
            client.zrem("unacked_index", tag)


def users() -> tuple[Any, Any]:
    from django.contrib.auth.models import Group, User

    operator = User.objects.create_user("bench-operator")
    operator.groups.add(Group.objects.get(name="operator"))
    reviewer = User.objects.create_user("bench-reviewer")
    reviewer.groups.add(Group.objects.get(name="reviewer"))
    return operator, reviewer


def drive(runs: list[Any], reviewer: Any, hosts: list[Host]) -> None:
    """Grant every publish as soon as it is asked, until every run has stopped."""
    from approvals.checks import DecisionRefused
    from approvals.models import ApprovalRequest
    from runs.approval_flow.flow import grant
    from runs.models import Run

    ids = [run.pk for run in runs]
    deadline = time.monotonic() + RUN_TIMEOUT
    while True:
        statuses = dict(Run.objects.filter(pk__in=ids).values_list("pk", "status"))
        if all(status in ("complete", "stopped") for status in statuses.values()):
            break
        waiting = [pk for pk, status in statuses.items() if status == "waiting_approval"]
        for request in ApprovalRequest.objects.filter(run_id__in=waiting, status="pending"):
            try:
                grant(request, reviewer)
            except DecisionRefused:
                continue  # the request is recorded a moment before the run waits: the next look
        if time.monotonic() > deadline or any(h.proc is None or h.proc.poll() is not None for h in hosts):
            logs = "\n".join(h.log()[-2000:] for h in hosts)
            raise SystemExit(f"runs not done after {RUN_TIMEOUT} s or a worker died: {statuses}\n{logs}")
        time.sleep(0.05)
    stopped = Run.objects.filter(pk__in=ids).exclude(outcome="complete").values_list("pk", "outcome", "stop_message")
    if stopped:
        raise SystemExit(f"runs did not complete: {list(stopped)}")


def warm_up(host: Host, operator: Any, reviewer: Any, contract: dict[str, Any], script: dict[str, Any]) -> None:
    """One run on this host's own queue, not counted: the worker's first run pays for
    its imports and its first container."""
    from celery import current_app

    from runs.runtime import create_run
    from runs.scheduling import hosts

    run = create_run(contract, script, operator, enqueue=False)
    current_app.send_task("runs.start_run", args=[str(run.pk)], queue=hosts.host_queue(host.name))
    drive([run], reviewer, [host])


def one_round(hosts: list[Host], n: int, operator: Any, reviewer: Any, contract: dict[str, Any], script: dict[str, Any]) -> dict[str, Any]:
    from runs.models import Event, Run
    from runs.runtime import create_run

    started = time.time()
    runs = [create_run(contract, script, operator) for _ in range(n)]
    drive(runs, reviewer, hosts)
    ids = [run.pk for run in runs]
    ended = {e.run_id: e.ts.timestamp() for e in Event.objects.filter(run_id__in=ids, type="stopped")}
    created = {run.pk: run.created_at.timestamp() for run in Run.objects.filter(pk__in=ids)}
    elapsed = max(ended.values()) - started
    return {
        "hosts": len(hosts),
        "runs": n,
        "seconds": round(elapsed, 2),
        "runs_per_minute": round(n * 60 / elapsed, 1),
        "run_seconds_median": round(statistics.median(ended[i] - created[i] for i in ids), 2),
        "runs_by_host": dict(sorted(Counter(Run.objects.filter(pk__in=ids).values_list("host", flat=True)).items())),
        # Each run stays on the host that prepared it: a rebuild here would be a bug.
        "rebuilds": Event.objects.filter(run_id__in=ids, type="run_resumed", payload__reason__icontains="rebuilt ").count(),
        "load": load(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=20, help="runs per round, created at once")
    parser.add_argument("--rounds", type=int, default=3, help="rounds with each number of hosts, alternating")
    parser.add_argument("--concurrency", type=int, default=os.cpu_count() or 2, help="worker processes per host (compose's default: nproc)")
    parser.add_argument("--engine", action="store_true", help="host B on a dockerd of its own (root)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    import django

    create_database()
    engine: Any = None
    started: list[Host] = []
    try:
        django.setup()
        from django.conf import settings
        from django.core.management import call_command

        call_command("migrate", verbosity=0)
        operator, reviewer = users()
        contract = json.loads((ROOT / "examples/demo/contract.json").read_text())
        script = {"kind": "scripted", "script": json.loads((ROOT / "examples/demo/proposals.json").read_text())}
        docker_host = None
        if args.engine:
            from tests.two_hosts import Engine

            engine = Engine(Path(f"/run/{TAG}"), Path(f"/var/lib/{TAG}"))
            engine.root.mkdir(parents=True, exist_ok=True)
            engine.start()
            engine.load_sandbox_image()
            docker_host = engine.host
        a = Host("host-a", args.concurrency, beat=True)
        b = Host("host-b", args.concurrency, docker_host=docker_host)
        started = [a, b]
        load_before = load()
        a.start()
        warm_up(a, operator, reviewer, contract, script)
        rounds: list[dict[str, Any]] = []
        for _ in range(args.rounds):
            rounds.append(one_round([a], args.runs, operator, reviewer, contract, script))
            b.start()
            warm_up(b, operator, reviewer, contract, script)
            rounds.append(one_round([a, b], args.runs, operator, reviewer, contract, script))
            b.stop()
        load_after = load()
        web_workspaces = Path(settings.WORKSPACE_ROOT)
        assert not web_workspaces.exists() or not any(web_workspaces.iterdir()), "a workspace on the web process's disk"
    finally:
        for host in started:
            host.stop()
        cleanup(engine)
    one = statistics.median(r["runs_per_minute"] for r in rounds if r["hosts"] == 1)
    two = statistics.median(r["runs_per_minute"] for r in rounds if r["hosts"] == 2)
    result = {
        "date": now(),
        "machine": machine(),
        "load_before": load_before,
        "load_after": load_after,
        "runs_per_round": args.runs,
        "concurrency_per_host": args.concurrency,
        "host_b_engine": "its own dockerd" if args.engine else "the machine's",
        "one_host_runs_per_minute": one,
        "two_hosts_runs_per_minute": two,
        "ratio_two_vs_one": round(two / one, 2),
        "rounds": rounds,
    }
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print(f"host throughput, {result['date']}, {result['machine']}; load {load_before} before, {load_after} after")
    print(
        f"the demo run, {args.runs} runs per round created at once, {args.concurrency} worker processes per host, host B on {result['host_b_engine']} engine"
    )
    for r in rounds:
        print(
            f"  {r['hosts']} host{'s' if r['hosts'] > 1 else ' '}: {r['runs_per_minute']:6.1f} runs/min ({r['seconds']:.1f} s), "
            f"a run {r['run_seconds_median']:.1f} s median, by host {r['runs_by_host']}, {r['rebuilds']} rebuilt, load {r['load']}"
        )
    print(f"one host  {one:6.1f} runs/min (median of {args.rounds})")
    print(f"two hosts {two:6.1f} runs/min (median of {args.rounds})")
    print(f"ratio     {result['ratio_two_vs_one']:6.2f}")


def cleanup(engine: Any) -> None:
    """Run containers of this scope on the machine's engine (and host B's), the Redis
    keys, the database, the directories."""
    import docker

    from sandbox.container.orphans import sweep_orphans

    try:
        client = docker.from_env()
        try:
            sweep_orphans([], scope=TAG, client=client)
        finally:
            client.close()
        if engine is not None:
            engine.remove(TAG)
        purge_redis()
    finally:
        drop_database()
        shutil.rmtree(VAR, ignore_errors=True)


if __name__ == "__main__":
    main()
