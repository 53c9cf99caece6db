"""Instructions counted by valgrind's callgrind around the measured part of a run only,
the figure load does not change.

The measured part runs inside ``measured(fn)``, that is inside ``sys.call_tracing``,
whose C function (``_PyEval_CallTracing``) nothing else calls: callgrind zeroes its
counters on entering it and dumps them on leaving it (``--zero-before`` /
``--dump-after``), so the dump holds the instructions of the measured part alone, of
every thread of the process (a check's watch and deadline threads included), and none
of the interpreter's start-up, the imports or the set-up before it. ``sys.call_tracing``
only sets the tracing state aside while it runs; with no tracer set it changes nothing.

    from bench.instructions import callgrind, measured
    measured(lambda: work(n))          # in the child, around the timed part
    callgrind(["bench/x.py", "--once", ...])  # in the parent: the child's count
    parts(["bench/x.py", ...])         # a child that measured several parts, in order

Valgrind runs a process tens of times slower, its start-up and imports included: one
child measuring several parts in turn (``parts``) costs one start-up, not one each.

Two identical runs agree when what the measured part does does not depend on the wall
clock: the child's hash seed is fixed here, and a benchmark whose process has a thread
waking on a timer (the harness's broadcasts) waits for it at fixed points
(bench/loop_overhead.py, ``sent_at_each_commit``).

Valgrind is a system package (``scripts/setup.sh`` installs it); ``available()`` says
whether it is here. Counts are of the client process only: what an engine or a
database server does for it is counted as requests or statements beside."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeVar

MARKER = "_PyEval_CallTracing"
# A child under valgrind at load 12-14 on 2 cores took more than 30 minutes
# (bench/ledger_cost.py --callgrind 20, its 124 grants): the count does not mind the wait.
TIMEOUT = 4 * 3600
T = TypeVar("T")


def measured(fn: Callable[[], T]) -> T:
    """Run ``fn`` as the part callgrind counts (outside callgrind: just run it)."""
    result: T = sys.call_tracing(fn, ())
    return result


def available() -> bool:
    return shutil.which("valgrind") is not None


def callgrind(argv: Sequence[str], env: dict[str, str] | None = None, timeout: float = TIMEOUT) -> int:
    """Instructions of the part a run of ``python argv`` measured (once)."""
    [count] = parts(argv, 1, env, timeout)
    return count


def parts(argv: Sequence[str], expected: int | None, env: dict[str, str] | None = None, timeout: float = TIMEOUT) -> list[int]:
    """Instructions of each of the ``expected`` parts a run of ``python argv``
    measured, in order; fails when the run failed or measured another number (any
    number, ``expected`` None, but none)."""
    with tempfile.TemporaryDirectory(prefix="bench-callgrind-") as tmp:
        out = Path(tmp) / "callgrind.out"
        done = subprocess.run(
            [
                "valgrind",
                "--tool=callgrind",
                f"--callgrind-out-file={out}",
                f"--zero-before={MARKER}",
                f"--dump-after={MARKER}",
                sys.executable,
                *argv,
            ],
            capture_output=True,
            text=True,
            # One hash seed for every count: with a random one, each run lays out its
            # dicts and sets differently, and the counts of two identical runs differ.
            env={**(env if env is not None else os.environ), "PYTHONHASHSEED": "0"},
            timeout=timeout,
            check=False,
        )
        if done.returncode != 0:
            raise RuntimeError(f"callgrind run of {' '.join(argv)} failed ({done.returncode}): {done.stderr[-2000:]}")
        dumps = sorted(Path(tmp).glob("callgrind.out.*"), key=lambda path: int(path.suffix[1:]))
        if (len(dumps) != expected) if expected is not None else not dumps:
            raise RuntimeError(f"callgrind run of {' '.join(argv)} measured {len(dumps)} parts, not {expected}")
        counts = []
        for dump in dumps:
            found = re.search(r"^summary:\s+(\d+)", dump.read_text(), re.MULTILINE)
            if found is None:
                raise RuntimeError(f"no summary in {dump.name}")
            counts.append(int(found.group(1)))
        return counts
