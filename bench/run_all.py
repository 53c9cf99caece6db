"""Run every benchmark in one go and print one table of their figures (medians,
tails and ratios, each measured within its own run). ``make bench`` calls this;
the results are recorded in docs/performance.md.

    python bench/run_all.py [--quick]"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from machine import load, machine, now  # noqa: E402

BENCHMARKS: dict[str, tuple[list[str], list[str]]] = {
    # name: (full arguments, quick arguments)
    "loop_overhead": ([], ["--steps", "500", "--trials", "3"]),
    "sandbox_overhead": ([], ["--reads", "200", "--checks", "6", "--starts", "3"]),
    "kill_latency": ([], ["--trials", "3"]),
    "trace_latency": ([], ["--seconds", "4", "--repeats", "2", "--events", "2000"]),
    "redaction_overhead": ([], ["--steps", "100", "--rounds", "3"]),
    "repo_scale": ([], ["--sizes", "10,5000", "--rounds", "1", "--calls", "50,50,2"]),
}


def flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(value, dict | list):
        out: dict[str, Any] = {}
        items = value.items() if isinstance(value, dict) else enumerate(value, start=1)
        for key, inner in items:
            out.update(flatten(inner, f"{prefix}.{key}" if prefix else str(key)))
        return out
    return {prefix: value}


def last_json(output: str) -> Any:
    """The JSON document a benchmark printed last (one line, or indented over several)."""
    text = output.strip()
    start = max(text.rfind("\n{"), text.rfind("\n["))
    return json.loads(text[start + 1 :] if start >= 0 else text)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="fewer repetitions, for a smoke run")
    args = parser.parse_args()
    failed = []
    # The machine is often shared: its load is recorded beside the figures, here and
    # in each benchmark's own output, so a run can be judged and compared later.
    print(f"make bench, {now()}, {machine()}, load {load()} (1, 5, 15 min)")
    print(f"{'benchmark':18} {'figure':58} value")
    for name, (full, quick) in BENCHMARKS.items():
        started = time.monotonic()
        command = [sys.executable, str(HERE / f"{name}.py"), "--json", *(quick if args.quick else full)]
        result = subprocess.run(command, capture_output=True, text=True)
        if result.returncode != 0:
            failed.append(name)
            print(f"{name:18} FAILED ({result.returncode}): {result.stderr.strip().splitlines()[-1:]}")
            continue
        figures = flatten(last_json(result.stdout))
        for key, value in figures.items():
            print(f"{name:18} {key:58} {value}")
        print(f"{name:18} {'(seconds to run)':58} {time.monotonic() - started:.0f}")
        print(f"{name:18} {'(load when done)':58} {load()}")
    if failed:
        raise SystemExit(f"failed: {', '.join(failed)}")


if __name__ == "__main__":
    main()
