"""What metrics and traces cost a durable step: the same steps as bench/loop_overhead.py
(the harness's loop through the Django store, under a lease, a no-op executor) with
the metrics listener off, with it on, and with it on and traces exported over
OTLP/HTTP to a receiver in another process on loopback.

    python bench/observability_cost.py [--steps N] [--trials T] [--callgrind N] [--no-callgrind] [--json]

Trials are interleaved (off, metrics, both; then the other way round) in one child
process on a fresh SQLite database, so all three see the same machine; every figure
is the median of the trials, and the ratios to "off" are the figures to compare. A
variant's CPU time (this process, every thread) ends when the exporter's thread has
sent what the steps gave it, so the spans' encoding and sending are in it; the wall
time ends with the last step. The receiver accepts each export and discards it (its
own CPU is not in the step's).

Beside them, the figure load does not change: the instructions of ``--callgrind``
steps of each variant (200 by default), counted by valgrind's callgrind around the
steps and the exporter's flush only (bench/instructions.py: each variant after a
warm-up of its own, in one process under callgrind, every thread counted), and
their ratios to "off". ``--measure N``: what callgrind runs."""

from __future__ import annotations

import argparse
import gc
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from machine import child_env, load, machine, now  # noqa: E402

from bench.instructions import available, measured, parts  # noqa: E402
from bench.loop_variants import harness_loop  # noqa: E402

VARIANTS = ("off", "metrics", "metrics+traces")


def receive(port_file: str) -> None:
    """The receiver: answers every POST 200, empty body, and counts the requests and
    the bytes it got; a GET answers those counts."""
    received = {"requests": 0, "bytes": 0}

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            received["requests"] += 1
            received["bytes"] += len(body)
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", "0")
            self.end_headers()

        def do_GET(self) -> None:
            body = json.dumps(received).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_: Any) -> None:
            pass

    # One thread: the counts are never updated by two at once.
    server = HTTPServer(("127.0.0.1", 0), Handler)
    Path(port_file).write_text(str(server.server_address[1]))
    server.serve_forever()


def steps_of() -> Any:
    """Runs inside the child process, on its fresh database: the function that does
    ``steps`` steps of a variant (a new run each time) and returns their wall time."""
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

    def switch(variant: str, traces_url: str) -> None:
        events_stored.disconnect(sender=Event, dispatch_uid="monitoring.on_events")
        if variant != "off":
            events_stored.connect(signals.on_events, sender=Event, dispatch_uid="monitoring.on_events")
        tracing.reset()
        settings.HARNESS_TRACES_URL = traces_url if variant == "metrics+traces" else ""

    def prepared(variant: str, steps: int, traces_url: str) -> Any:
        """The variant switched on and its run made: what is left is the steps."""
        switch(variant, traces_url)
        run = Run.objects.create(task_id="bench", objective="measure", contract={}, policy=policy, proposer={}, lease_token=1)

        def go() -> float:
            seconds = harness_loop(steps, DjangoStore(Lease(1)), str(run.pk))
            # What the exporter's thread still holds is sent before the next variant:
            # its work belongs to this one.
            assert tracing.flush()
            return seconds

        return go

    return prepared


def received(traces_url: str) -> dict[str, int]:
    with urllib.request.urlopen(traces_url) as answer:
        counts: dict[str, int] = json.load(answer)
    return counts


def trials(steps: int, count: int, traces_url: str) -> dict[str, Any]:
    prepared = steps_of()
    sent = {"requests": 0, "bytes": 0, "steps": 0}

    def step_time(variant: str) -> tuple[float, float]:
        go = prepared(variant, steps, traces_url)
        before = received(traces_url)
        started = time.process_time()
        seconds = go()
        cpu = (time.process_time() - started) / steps
        if variant == "metrics+traces":
            after = received(traces_url)
            sent["requests"] += after["requests"] - before["requests"]
            sent["bytes"] += after["bytes"] - before["bytes"]
            sent["steps"] += steps
        return seconds, cpu

    for variant in VARIANTS:  # warm-up: imports, statements built, the exporter made
        step_time(variant)
    result: dict[str, dict[str, list[float]]] = {v: {"seconds": [], "cpu": []} for v in VARIANTS}
    for trial in range(count):
        for variant in VARIANTS if trial % 2 == 0 else reversed(VARIANTS):
            seconds, cpu = step_time(variant)
            result[variant]["seconds"].append(seconds)
            result[variant]["cpu"].append(cpu)
    return {"variants": result, "sent": sent}


def measure_instructions(steps: int, traces_url: str) -> None:
    """What callgrind runs: ``steps`` steps of each variant in turn, each measured
    apart after a warm-up of its own. Callgrind runs the process some 50 times slower,
    so the exporter's delay is made long enough that it sends the steps' spans in
    batches as large as at full speed (there, 300 steps take under its 1 s delay):
    its requests per step are counted at full speed, beside."""
    prepared = steps_of()
    from django.conf import settings

    settings.HARNESS_TRACES_DELAY_MS = 600_000
    for variant in VARIANTS:
        prepared(variant, 20, traces_url)()
        go = prepared(variant, steps, traces_url)
        # What the set-up left for the collector is collected before the count, not
        # in it: otherwise a variant pays for whatever came before it.
        gc.collect()
        measured(go)


def measure(steps: int, count: int, callgrind: int) -> dict[str, Any]:
    folder = Path(tempfile.mkdtemp(prefix="bench-observe-"))
    port_file = folder / "port"
    receiver = subprocess.Popen([sys.executable, __file__, "--receiver", str(port_file)])
    try:
        while not port_file.exists() or not port_file.read_text():
            time.sleep(0.05)
        url = f"http://127.0.0.1:{port_file.read_text()}/v1/traces"
        env = child_env(folder)
        command = [sys.executable, __file__, "--child", url, "--steps", str(steps), "--trials", str(count)]
        out = subprocess.run(command, env=env, capture_output=True, text=True, check=True).stdout
        found: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
        measured, sent = found["variants"], found["sent"]
        counts = parts([__file__, "--measure", str(callgrind), "--child", url], len(VARIANTS), env) if callgrind else []
    finally:
        receiver.terminate()
        receiver.wait(10)
        shutil.rmtree(folder, ignore_errors=True)
    off = {key: statistics.median(measured["off"][key]) for key in ("seconds", "cpu")}
    per_step = {variant: round(count / callgrind) for variant, count in zip(VARIANTS, counts, strict=True)}
    return {
        "machine": machine(),
        "when": now(),
        "load": load(),
        "steps": steps,
        "trials": count,
        "callgrind_steps": callgrind,
        "export_requests_per_step": round(sent["requests"] / sent["steps"], 4),
        "export_bytes_per_step": round(sent["bytes"] / sent["steps"]),
        "variants": {
            variant: {
                "wall_us_per_step": round(statistics.median(figures["seconds"]) * 1e6, 1),
                "cpu_us_per_step": round(statistics.median(figures["cpu"]) * 1e6, 1),
                "wall_ratio_to_off": round(statistics.median(figures["seconds"]) / off["seconds"], 3),
                "cpu_ratio_to_off": round(statistics.median(figures["cpu"]) / off["cpu"], 3),
                **(
                    {"instructions_per_step": per_step[variant], "instruction_ratio_to_off": round(per_step[variant] / per_step["off"], 3)}
                    if per_step
                    else {}
                ),
            }
            for variant, figures in measured.items()
        },
    }


def table(result: dict[str, Any]) -> str:
    lines = [
        "| variant | instructions/step | instructions / off | CPU µs/step | CPU / off | wall µs/step | wall / off |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for variant, row in result["variants"].items():
        lines.append(
            f"| {variant} | {row.get('instructions_per_step', '-'):,} | {row.get('instruction_ratio_to_off', '-')}"
            f" | {row['cpu_us_per_step']} | {row['cpu_ratio_to_off']} | {row['wall_us_per_step']} | {row['wall_ratio_to_off']} |"
        )
    lines.append(
        f"\nexports to the receiver: {result['export_requests_per_step']} requests, {result['export_bytes_per_step']:,} bytes per step"
    )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--callgrind", type=int, default=200, metavar="N", help="steps of each variant under callgrind")
    parser.add_argument("--no-callgrind", action="store_true", help="times only")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--measure", type=int, metavar="N", help=argparse.SUPPRESS)
    parser.add_argument("--child", metavar="TRACES_URL", help=argparse.SUPPRESS)
    parser.add_argument("--receiver", metavar="PORT_FILE", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.receiver:
        receive(args.receiver)
    elif args.measure:
        measure_instructions(args.measure, args.child)
    elif args.child:
        print(json.dumps(trials(args.steps, args.trials, args.child)))
    else:
        result = measure(args.steps, args.trials, 0 if args.no_callgrind or not available() else args.callgrind)
        print(table(result))
        print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
