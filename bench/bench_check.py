"""The counts the machine's load does not change (instructions, requests to the
engine), measured briefly and printed beside their recorded baseline
(bench/baseline.json), so that a regression shows in one command; it fails when a
count is above its baseline by more than its tolerance. ``make bench-check`` runs it,
and CI (.ci/run).

    python bench/bench_check.py [--update]

Each baseline row: ``figure`` (what it is), ``benchmark`` and ``args`` (the run that
measures it, each distinct run made once), ``key`` (where its value is in that run's
JSON, dotted), ``value`` (the recorded count), ``tolerance`` (the fraction it may grow
by before it fails: 0 for a count of requests, a few percent for instructions, which
move a little with the interpreter's hashing and its threads) and ``command`` (the
full measurement, for the docs). A count well below its baseline is reported too:
record it with ``--update``, which writes the values of this run into the file."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
BASELINE = HERE / "baseline.json"
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from machine import load, now  # noqa: E402

from bench.run_all import last_json  # noqa: E402


def lookup(document: Any, key: str) -> Any:
    for part in key.split("."):
        document = document[part]
    return document


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--update", action="store_true", help="record this run's values as the baseline")
    parser.add_argument("--baseline", type=Path, default=BASELINE)
    args = parser.parse_args()
    rows: list[dict[str, Any]] = json.loads(args.baseline.read_text())
    runs: dict[tuple[str, ...], Any] = {}
    print(f"make bench-check, {now()}, load {load()} (1, 5, 15 min)")
    for row in rows:
        run = (row["benchmark"], *row["args"])
        if run in runs:
            continue
        started = time.monotonic()
        done = subprocess.run(
            [sys.executable, str(HERE / f"{row['benchmark']}.py"), *row["args"], "--json"], capture_output=True, text=True
        )
        if done.returncode != 0:
            raise SystemExit(f"{' '.join(run)} failed ({done.returncode}): {done.stderr.strip()[-2000:]}")
        runs[run] = last_json(done.stdout)
        print(f"  ran {' '.join(run)} in {time.monotonic() - started:.0f} s")
    failed = []
    width = max(len(row["figure"]) for row in rows)
    print(f"{'figure':{width}}  {'baseline':>12}  {'now':>12}  {'change':>8}  tolerance")
    for row in rows:
        value = lookup(runs[(row["benchmark"], *row["args"])], row["key"])
        change = value / row["value"] - 1 if row["value"] else 0.0
        verdict = ""
        if change > row["tolerance"]:
            verdict = "REGRESSED"
            failed.append(row["figure"])
        elif change < -max(row["tolerance"], 0.01):
            verdict = "better: record it (--update)"
        print(f"{row['figure']:{width}}  {row['value']:>12,}  {value:>12,}  {change:>+8.1%}  {row['tolerance']:.0%} {verdict}")
        if args.update:
            row["value"] = value
    if args.update:
        args.baseline.write_text(json.dumps(rows, indent=2) + "\n")
        print(f"recorded in {args.baseline}")
    elif failed:
        raise SystemExit(f"regressed beyond tolerance: {', '.join(failed)}")


if __name__ == "__main__":
    main()
