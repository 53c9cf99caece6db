"""What metrics and traces cost a durable step: the same steps as bench/loop_overhead.py
(the harness's loop through the Django store, under a lease, a no-op executor) with
the metrics listener off, with it on, and with it on and traces exported over
OTLP/HTTP to a receiver in another process on loopback.

    python bench/observability_cost.py [--steps N] [--trials T] [--json]

Trials are interleaved (off, metrics, both; then the other way round) in one child
process on a fresh SQLite database, so all three see the same machine; every figure
is the median of the trials, and the ratios to "off" are the figures to compare.
The receiver accepts each export and discards it (its own CPU is not in the step's)."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from machine import load, machine, now  # noqa: E402

from bench.loop_variants import harness_loop  # noqa: E402

VARIANTS = ("off", "metrics", "metrics+traces")


def receive(port_file: str) -> None:
    """The receiver: answers every POST 200, empty body, and counts the bytes it got."""

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length", "0")))
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *_: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    Path(port_file).write_text(str(server.server_address[1]))
    server.serve_forever()


def trials(steps: int, count: int, traces_url: str) -> dict[str, Any]:
    """Runs inside the child process, on its fresh database."""
    import django

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "harness_site.settings")
    django.setup()
    from django.conf import settings
    from django.core.management import call_command

    from approvals.policies import current_policy_row
    from core.fences import Lease
    from monitoring import signals, tracing
    from runs.models import Event, Run
    from runs.persistence.signals import events_stored
    from runs.persistence.store import DjangoStore

    call_command("migrate", verbosity=0)
    policy = current_policy_row()

    def switch(variant: str) -> None:
        events_stored.disconnect(sender=Event, dispatch_uid="monitoring.on_events")
        if variant != "off":
            events_stored.connect(signals.on_events, sender=Event, dispatch_uid="monitoring.on_events")
        tracing.reset()
        settings.HARNESS_TRACES_URL = traces_url if variant == "metrics+traces" else ""

    def step_time(variant: str) -> tuple[float, float]:
        switch(variant)
        run = Run.objects.create(task_id="bench", objective="measure", contract={}, policy=policy, proposer={}, lease_token=1)
        started = time.process_time()
        seconds = harness_loop(steps, DjangoStore(Lease(1)), str(run.pk))
        cpu = (time.process_time() - started) / steps
        # What the exporter's thread still holds is sent before the next variant: its
        # time belongs to this one (the flush is in the CPU figure, not the wall one).
        assert tracing.flush()
        return seconds, cpu

    for variant in VARIANTS:  # warm-up: imports, statements built, the exporter made
        step_time(variant)
    result: dict[str, dict[str, list[float]]] = {v: {"seconds": [], "cpu": []} for v in VARIANTS}
    for trial in range(count):
        for variant in VARIANTS if trial % 2 == 0 else reversed(VARIANTS):
            seconds, cpu = step_time(variant)
            result[variant]["seconds"].append(seconds)
            result[variant]["cpu"].append(cpu)
    return result


def measure(steps: int, count: int) -> dict[str, Any]:
    folder = Path(tempfile.mkdtemp(prefix="bench-observe-"))
    port_file = folder / "port"
    receiver = subprocess.Popen([sys.executable, __file__, "--receiver", str(port_file)])
    try:
        while not port_file.exists() or not port_file.read_text():
            time.sleep(0.05)
        url = f"http://127.0.0.1:{port_file.read_text()}/v1/traces"
        env = {
            **os.environ,
            "DEBUG": "0",
            "SECRET_KEY": uuid.uuid4().hex + uuid.uuid4().hex,
            "DATABASE_URL": f"sqlite:///{folder / 'harness.sqlite3'}",
            "HARNESS_VAR_DIR": str(folder),
        }
        command = [sys.executable, __file__, "--child", url, "--steps", str(steps), "--trials", str(count)]
        out = subprocess.run(command, env=env, capture_output=True, text=True, check=True).stdout
        measured: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    finally:
        receiver.terminate()
        receiver.wait(10)
        shutil.rmtree(folder, ignore_errors=True)
    off = {key: statistics.median(measured["off"][key]) for key in ("seconds", "cpu")}
    return {
        "machine": machine(),
        "when": now(),
        "load": load(),
        "steps": steps,
        "trials": count,
        "variants": {
            variant: {
                "wall_us_per_step": round(statistics.median(figures["seconds"]) * 1e6, 1),
                "cpu_us_per_step": round(statistics.median(figures["cpu"]) * 1e6, 1),
                "wall_ratio_to_off": round(statistics.median(figures["seconds"]) / off["seconds"], 3),
                "cpu_ratio_to_off": round(statistics.median(figures["cpu"]) / off["cpu"], 3),
            }
            for variant, figures in measured.items()
        },
    }


def table(result: dict[str, Any]) -> str:
    lines = ["| variant | wall µs/step | CPU µs/step | wall / off | CPU / off |", "| --- | --- | --- | --- | --- |"]
    for variant, row in result["variants"].items():
        lines.append(
            f"| {variant} | {row['wall_us_per_step']} | {row['cpu_us_per_step']} | {row['wall_ratio_to_off']} | {row['cpu_ratio_to_off']} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--child", metavar="TRACES_URL", help=argparse.SUPPRESS)
    parser.add_argument("--receiver", metavar="PORT_FILE", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.receiver:
        receive(args.receiver)
    elif args.child:
        print(json.dumps(trials(args.steps, args.trials, args.child)))
    else:
        result = measure(args.steps, args.trials)
        print(table(result))
        print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
