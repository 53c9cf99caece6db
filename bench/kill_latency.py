"""Kill-switch latency: from the operator's kill (the database flag) to the run's
sandbox container being gone, and to the run stopped ``killed``, while a check is
executing, with a real Celery worker and the real Docker engine.

    python bench/kill_latency.py [--trials N] [--json]

Uses its own SQLite database, Celery queue and container scope."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from celery_worker import start_worker  # noqa: E402
from machine import load, machine, now  # noqa: E402

VAR = Path(tempfile.mkdtemp(prefix="bench-kill-"))
QUEUE = f"bench-kill-{uuid.uuid4().hex[:8]}"
ENV = {
    **os.environ,
    "DEBUG": "1",
    "DJANGO_SETTINGS_MODULE": "harness_site.settings",
    "HARNESS_VAR_DIR": str(VAR),
    "HARNESS_QUEUE": QUEUE,
    "HARNESS_SANDBOX_SCOPE": QUEUE,
}
os.environ.update(ENV)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--trials", type=int, default=10)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    import django

    django.setup()
    import docker
    from django.contrib.auth.models import Group, User
    from django.core.management import call_command

    from approvals.models import PolicyVersion
    from approvals.policies import current_policy_row
    from runs.control import do_kill
    from runs.models import Event, Run
    from runs.runtime import create_run

    call_command("migrate", verbosity=0)
    row = current_policy_row()
    document = {**row.document, "version": row.version + 1}
    document["checks"] = [*document["checks"], {"check_id": "slow", "command": ["sleep", "300"], "timeout_seconds": 600}]
    PolicyVersion.objects.create(project_id=row.project_id, version=row.version + 1, document=document, note="bench")
    # Roles are held in projects: the global operator group is the default project's operators.
    operator = User.objects.create_user("bench-operator")
    operator.groups.add(Group.objects.get(name="operator"))
    contract = json.loads((ROOT / "examples/demo/contract.json").read_text())
    contract["verification_targets"] = ["slow"]
    script = {"kind": "scripted", "script": [{"tool": "run_check", "args": {"check_id": "slow"}}]}
    client = docker.from_env()

    worker = start_worker(QUEUE, 2, ENV)
    latencies = []
    stopped = []
    to_stop = []
    try:
        for _ in range(args.trials):
            run = create_run(contract, script, operator)
            deadline = time.monotonic() + 120
            while not Event.objects.filter(run=run, type="call_started").exists():
                if time.monotonic() > deadline:
                    raise SystemExit("the check never started; is the worker running?")
                time.sleep(0.02)
            time.sleep(0.3)
            clicked = time.monotonic()
            do_kill(run, "bench")
            # sparse: one listing call and no per-container inspect, so a container that
            # vanishes between the listing and its inspect is not a 404.
            while client.containers.list(all=True, sparse=True, filters={"label": f"harness.run_id={run.pk}"}):
                time.sleep(0.01)
            latencies.append(time.monotonic() - clicked)
            while Run.objects.get(pk=run.pk).status != "stopped":
                time.sleep(0.01)
            stopped.append(time.monotonic() - clicked)
            to_stop.append(Run.objects.get(pk=run.pk).outcome)
    finally:
        os.killpg(worker.pid, 15)
        worker.wait(30)
        shutil.rmtree(VAR, ignore_errors=True)
    result = {
        "date": now(),
        "machine": machine(),
        "load": load(),
        "trials": len(latencies),
        "median_s": round(statistics.median(latencies), 3),
        "p90_s": round(sorted(latencies)[int(0.9 * (len(latencies) - 1))], 3),
        "max_s": round(max(latencies), 3),
        "stopped_median_s": round(statistics.median(stopped), 3),
        "stopped_max_s": round(max(stopped), 3),
        "outcomes": sorted(set(to_stop)),
    }
    if args.json:
        print(json.dumps(result))
    else:
        print("kill switch: flag set -> container gone (median/p90/max), -> run stopped (stopped_*), while a check executes")
        for key, value in result.items():
            print(f"  {key:10} {value}")


if __name__ == "__main__":
    main()
