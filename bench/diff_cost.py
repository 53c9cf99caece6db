"""What a diff costs: the publish diff (sandbox.patches.unified_diff, bounded work)
on the input of issue 26 #4 (a 3,000-line file rewritten as 130 KB of alternating
blank lines) and on the largest diffs a publish handles, against difflib's
SequenceMatcher (what it used before) on growing cuts of the same input; and what
the reviewer's page costs to build for the probe's diff (its rows and tables).
CPU seconds (process time) and peak memory (tracemalloc, in a second pass).

    python bench/diff_cost.py [--difflib-cuts 250,500,1000] [--json]"""

from __future__ import annotations

import argparse
import difflib
import json
import os
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

OLD = "".join(f"value = {n}\n" if n % 3 else "\n" for n in range(3000))
NEW = "x\n\n" * 43_000


def measured(work: Callable[[], Any]) -> dict[str, float]:
    start = time.process_time()
    work()
    cpu = time.process_time() - start
    tracemalloc.start()
    work()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return {"cpu_s": round(cpu, 3), "peak_mb": round(peak / 2**20, 1)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--difflib-cuts", default="250,500,1000", help="units of 'x\\n\\n' of the new text given to difflib")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    os.environ.update({"DEBUG": "1", "DJANGO_SETTINGS_MODULE": "harness_site.settings", "HARNESS_VAR_DIR": tempfile.mkdtemp(prefix="bench-")})
    import django

    django.setup()
    from django.template.loader import render_to_string

    from runs.core.patchtext import split_lines
    from sandbox.patches import unified_diff

    rows = [f"row {n}\n" for n in range(1_000_000)]
    big = "".join(rows)
    rewritten = "".join(f"line {n} changed\n" for n in range(100_000))
    inputs = {
        "probe: 3,000 lines -> 130 KB of alternating blank lines": (OLD, NEW),
        "1,000,000 lines (6.9 MB), one line changed": (big, big.replace("row 500000\n", "row x\n")),
        "100,000 lines rewritten whole (200,000-line diff)": ("".join(rows[:100_000]), rewritten),
    }
    results: dict[str, Any] = {"harness": {}, "difflib": {}}
    for name, (old, new) in inputs.items():
        diff: list[str] = []
        results["harness"][name] = {**measured(lambda o=old, n=new: diff.append(unified_diff("f.txt", o, n))), "diff_bytes": len(diff[-1])}
    for cut in [int(c) for c in args.difflib_cuts.split(",") if c]:
        a, b = split_lines(OLD), split_lines(NEW[: 3 * cut])
        results["difflib"][f"probe, first {cut * 2} new lines"] = measured(
            lambda a=a, b=b: list(difflib.SequenceMatcher(None, a, b, autojunk=False).get_grouped_opcodes(3))
        )
    probe = unified_diff("orders/data.txt", OLD, NEW)
    results["page"] = {
        "probe diff, approval page's diff tables": {
            **measured(lambda: render_to_string("approvals/_diff.html", {"diff": probe})),
            "diff_lines": probe.count("\n"),
            "html_mb": round(len(render_to_string("approvals/_diff.html", {"diff": probe})) / 2**20, 1),
        }
    }
    results["load_average"] = os.getloadavg()
    if args.json:
        print(json.dumps(results, indent=2))
        return
    for group, found in results.items():
        if isinstance(found, dict):
            for name, figures in found.items():
                print(f"{group:8} {name}: {figures}")
    print(f"load average {results['load_average']}")


if __name__ == "__main__":
    main()
