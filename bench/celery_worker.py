"""A Celery worker process for a benchmark: its own queue, its own process group (so
stopping it stops its children), output to ``log`` or nowhere."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def start_worker(
    queue: str, concurrency: int, env: Mapping[str, str], log: Path | None = None, extra: Sequence[str] = ()
) -> subprocess.Popen[bytes]:
    """``extra``: more worker options (a node name, an embedded beat)."""
    command = [sys.executable, "-m", "celery", "-A", "harness_site", "worker", "-Q", queue, "-c", str(concurrency)]
    return subprocess.Popen(
        [*command, "--without-gossip", "--without-mingle", "-l", "warning", *extra],
        cwd=ROOT,
        env=dict(env),
        stdout=open(log, "wb") if log else subprocess.DEVNULL,  # closed with the process
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
