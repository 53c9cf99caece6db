"""What a diff costs: the publish diff (sandbox.workspace.patches.unified_diff, bounded work)
on the input of issue 26 #4 (a 3,000-line file rewritten as 130 KB of alternating
blank lines) and on the largest diffs a publish handles, against difflib's
SequenceMatcher (what it used before) on growing cuts of the same input; and what
the reviewer's page costs to build for the probe's diff (its rows and tables).
CPU seconds (process time) and the peak resident memory the work added, each case
in a fresh process.

    python bench/diff_cost.py [--difflib-cuts 250,500,1000] [--json]"""

from __future__ import annotations

import argparse
import atexit
import difflib
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

OLD = "".join(f"value = {n}\n" if n % 3 else "\n" for n in range(3000))
NEW = "x\n\n" * 43_000


def measured(work: Callable[[], Any]) -> dict[str, float]:
    """CPU and peak memory of ``work`` in this (fresh) process: run it once."""
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    start = time.process_time()
    work()
    cpu = time.process_time() - start
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {"cpu_s": round(cpu, 3), "rss_before_mb": round(before / 1024, 1), "peak_rss_mb": round(peak / 1024, 1)}


def one_case(case: str, cut: int) -> dict[str, Any]:
    from django.template.loader import render_to_string

    from core.patchtext import split_lines
    from sandbox.workspace.patches import unified_diff

    if case == "difflib":
        a, b = split_lines(OLD), split_lines(NEW[: 3 * cut])
        return measured(lambda: list(difflib.SequenceMatcher(None, a, b, autojunk=False).get_grouped_opcodes(3)))
    if case == "page":
        probe = unified_diff("orders/data.txt", OLD, NEW)
        html: list[str] = []
        figures = measured(lambda: html.append(render_to_string("approvals/_diff.html", {"diff": probe})))
        return {**figures, "diff_lines": probe.count("\n"), "html_mb": round(len(html[0]) / 2**20, 1)}
    old, new = inputs()[case]()
    diff: list[str] = []
    return {**measured(lambda: diff.append(unified_diff("f.txt", old, new))), "diff_bytes": len(diff[0])}


def inputs() -> dict[str, Callable[[], tuple[str, str]]]:
    def big() -> tuple[str, str]:
        text = "".join(f"row {n}\n" for n in range(1_000_000))
        return text, text.replace("row 500000\n", "row x\n")

    def rewritten() -> tuple[str, str]:
        return "".join(f"row {n}\n" for n in range(100_000)), "".join(f"line {n} changed\n" for n in range(100_000))

    return {
        "probe: 3,000 lines -> 130 KB of alternating blank lines": lambda: (OLD, NEW),
        "1,000,000 lines (6.9 MB), one line changed": big,
        "100,000 lines rewritten whole (200,000-line diff)": rewritten,
    }


def in_fresh_process(case: str, cut: int = 0) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, __file__, "--case", case, "--cut", str(cut)], capture_output=True, text=True, check=True, env=os.environ
    )
    return dict(json.loads(done.stdout))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--difflib-cuts", default="250,500,1000", help="units of 'x\\n\\n' of the new text given to difflib")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--case", help=argparse.SUPPRESS)
    parser.add_argument("--cut", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    os.environ.update({"DEBUG": "1", "DJANGO_SETTINGS_MODULE": "harness_site.settings"})
    if "HARNESS_VAR_DIR" not in os.environ:  # the children share their parent's, which removes it
        os.environ["HARNESS_VAR_DIR"] = tempfile.mkdtemp(prefix="bench-")
        atexit.register(shutil.rmtree, os.environ["HARNESS_VAR_DIR"], True)
    import django

    django.setup()
    if args.case:
        print(json.dumps(one_case(args.case, args.cut)))
        return
    results: dict[str, Any] = {
        "harness": {name: in_fresh_process(name) for name in inputs()},
        "difflib": {
            f"probe, first {2 * int(cut)} new lines": in_fresh_process("difflib", int(cut)) for cut in args.difflib_cuts.split(",") if cut
        },
        "page": {"probe diff, the approval page's diff tables": in_fresh_process("page")},
        "load_average": [round(x, 1) for x in os.getloadavg()],
    }
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
