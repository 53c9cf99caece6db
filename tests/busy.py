"""The CPUs kept deliberately busy: a bounded number of spinning processes, started and
always stopped, for tests (and `make test-busy`) that must hold on a loaded machine.

Each spinner also stops by itself after ``SPIN_SECONDS``, so none outlives a test
process that was killed before it could stop them.

As a program: ``python3 -m tests.busy COUNT COMMAND...`` runs the command with COUNT
spinners beside it and exits with its status."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager

# Longer than the Docker, Celery and browser suites take on a loaded machine (make test-busy).
SPIN_SECONDS = 3 * 3600
SPIN = "import time\nend = time.monotonic() + float(__import__('sys').argv[1])\nwhile time.monotonic() < end:\n    pass\n"


@contextmanager
def spinning(count: int, seconds: float = SPIN_SECONDS) -> Iterator[list[subprocess.Popen[bytes]]]:
    """``count`` processes, each spinning on a CPU for at most ``seconds``, for as long
    as the block lasts."""
    spinners: list[subprocess.Popen[bytes]] = []
    try:
        for _ in range(count):
            spinners.append(subprocess.Popen([sys.executable, "-c", SPIN, str(seconds)]))
        yield spinners
    finally:
        for spinner in spinners:
            spinner.kill()
        for spinner in spinners:
            spinner.wait()


def main(argv: list[str]) -> int:
    if len(argv) < 2 or not argv[0].isdigit():
        print("usage: python3 -m tests.busy COUNT COMMAND...", file=sys.stderr)
        return 2
    with spinning(int(argv[0])):
        return subprocess.call(argv[1:])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
