"""Polling helpers for tests that watch real worker processes drive runs."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

from runs.models import Event, Run

ROOT = Path(__file__).resolve().parent.parent
DEMO_CONTRACT = json.loads((ROOT / "examples/demo/contract.json").read_text())
DEMO_SCRIPT = json.loads((ROOT / "examples/demo/proposals.json").read_text())
SCRIPTED_DEMO = {"kind": "scripted", "script": DEMO_SCRIPT}


def wait_for(run: Run, statuses: tuple[str, ...], timeout: float = 60, log: Callable[[], str] = lambda: "") -> Run:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        run.refresh_from_db()
        if run.status in statuses:
            return run
        time.sleep(0.1)
    events = list(Event.objects.filter(run=run).values_list("seq", "type"))
    raise AssertionError(f"run {run.pk} is {run.status} after {timeout}s, not {statuses}; events {events}\n{log()[-4000:]}")


def assert_gap_free(run: Run) -> list[str]:
    seqs = list(Event.objects.filter(run=run).order_by("seq").values_list("seq", flat=True))
    assert seqs == list(range(1, len(seqs) + 1)), seqs
    return list(Event.objects.filter(run=run).order_by("seq").values_list("type", flat=True))
