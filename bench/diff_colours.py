"""What syntax colours cost on the reviewer's page: the diff tables
(pages.diff_view.diff_tables) for a Python diff of N added lines, coloured and
plain, in one run (the ratio is the result; the machine sets the seconds), and the
first lexer lookup of a process.

    python bench/diff_colours.py [--lines 250,500,1000] [--json]"""

from __future__ import annotations

import argparse
import functools
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def python_diff(lines: int) -> str:
    body = "".join(f"+    value_{i} = compute(x, 'text {i}')  # note {i}\n" for i in range(lines))
    return f"--- a/a.py\n+++ b/a.py\n@@ -0,0 +1,{lines} @@\n{body}"


def best_of(repeat: int, work: Callable[[], object]) -> float:
    times = []
    for _ in range(repeat):
        start = time.process_time()
        work()
        times.append(time.process_time() - start)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--lines", default="250,500,1000")
    parser.add_argument("--json", action="store_true")
    options = parser.parse_args()
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "harness_site.test_settings")
    os.environ.setdefault("DEBUG", "1")
    import django

    django.setup()
    from pages import diff_review, diff_view

    start = time.process_time()
    diff_review.lexer_for("first.py")
    cases: list[dict[str, Any]] = []
    results: dict[str, Any] = {"first_lookup_cpu_s": round(time.process_time() - start, 3), "cases": cases}
    for lines in (int(n) for n in options.lines.split(",")):
        text = python_diff(lines)
        diff_review.HIGHLIGHT_MAX_LINES = 10**9
        coloured = best_of(3, functools.partial(diff_view.diff_tables, text))
        diff_review.HIGHLIGHT_MAX_LINES = 0
        plain = best_of(3, functools.partial(diff_view.diff_tables, text))
        cases.append({"lines": lines, "coloured_s": round(coloured, 3), "plain_s": round(plain, 3), "ratio": round(coloured / plain, 1)})
    if options.json:
        print(json.dumps(results))
        return
    print(f"first lexer lookup: {results['first_lookup_cpu_s']} s")
    for case in cases:
        print(f"{case['lines']:>6} lines: coloured {case['coloured_s']} s, plain {case['plain_s']} s, {case['ratio']}x")


if __name__ == "__main__":
    main()
