"""The fault suite: SIGKILL the worker (and its children) at random points of the
demo run, restart it, and check that nothing is lost: the run ends in a correct
state, its event log is gap-free, and the publish effect happens at most once.
The figures go to docs/reliability.md (printed with -s, and saved as JSON)."""

from __future__ import annotations

import json
import os
import random
import time
from collections import Counter
from pathlib import Path

import pytest
from django.conf import settings
from django.contrib.auth.models import User
from pytest_django import Settings

from approvals.models import ApprovalRequest
from runs.approval_flow.flow import grant
from runs.models import Event, Receipt, Run
from runs.persistence.outbox import published_patch
from runs.runtime import create_run
from tests.fixtures_services import Worker
from tests.runs_waiting import DEMO_CONTRACT, SCRIPTED_DEMO, assert_gap_free, wait_for

pytestmark = [pytest.mark.celery, pytest.mark.docker]

TRIALS = int(os.environ.get("HARNESS_FAULT_TRIALS", "20"))


def outbox_files(run: Run) -> list[bytes]:
    keys = set(
        Event.objects.filter(run=run, type="call_started", payload__tool="publish").values_list("payload__idempotency_key", flat=True)
    )
    return [patch for key in sorted(keys) if (patch := published_patch(key)) is not None]


def publish_started(run: Run, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not Event.objects.filter(run=run, type="call_started", payload__tool="publish").exists():
        assert time.monotonic() < deadline, "publish never started"
        time.sleep(0.005)


def finish(run: Run, reviewer: User, worker: Worker, timeout: float = 120) -> Run:
    """Drive the run to its end, granting approvals as a reviewer would."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        run.refresh_from_db()
        if run.status in ("complete", "stopped"):
            return run
        request = ApprovalRequest.objects.filter(run=run, status="pending").first()
        if request is not None and run.status == "waiting_approval":
            grant(request, reviewer)
        time.sleep(0.1)
    return wait_for(run, ("complete", "stopped"), timeout=1, log=worker.log)


def trace_of(run: Run) -> list[str]:
    """The run's events in brief, for the message of a failed trial."""
    return [f"{e.seq} {e.type} {e.call_id or ''} {json.dumps(e.payload)[:160]}" for e in Event.objects.filter(run=run).order_by("seq")]


def test_it_loses_nothing_when_the_worker_is_killed_at_random_points(celery_worker: Worker, operator: User, reviewer: User) -> None:
    rng = random.Random(int(os.environ.get("HARNESS_FAULT_SEED", "7")))
    # One clean run first: how long the demo takes before and after its approval.
    started = time.monotonic()
    clean = wait_for(create_run(DEMO_CONTRACT, SCRIPTED_DEMO, operator), ("waiting_approval",), timeout=90, log=celery_worker.log)
    before_span = time.monotonic() - started
    granted = time.monotonic()
    clean = finish(clean, reviewer, celery_worker)
    assert clean.outcome == "complete"
    after_span = time.monotonic() - granted
    outcomes: Counter[str] = Counter()
    interrupted: Counter[str] = Counter()
    duplicates = 0
    not_applied = 0
    for trial in range(TRIALS):
        run = create_run(DEMO_CONTRACT, SCRIPTED_DEMO, operator)
        # A third of the trials die on the way to the approval, a third at a random
        # moment after the grant, a third the moment the publish call starts.
        phase = trial % 3
        if phase == 0:
            time.sleep(rng.uniform(0.2, before_span))
        else:
            run = wait_for(run, ("waiting_approval",), timeout=90, log=celery_worker.log)
            grant(ApprovalRequest.objects.get(run=run, status="pending"), reviewer)
            if phase == 1:
                time.sleep(rng.uniform(0.0, after_span))
            else:
                publish_started(run)
        celery_worker.kill()
        celery_worker.start()
        run = finish(run, reviewer, celery_worker)
        types = assert_gap_free(run)
        outcomes[run.outcome] += 1
        for event in Event.objects.filter(run=run, type="run_resumed"):
            interrupted[event.payload["reason"].split(":")[1].split()[0]] += 1
        published = outbox_files(run)
        duplicates += max(0, len(published) - 1)
        receipts = list(Receipt.objects.filter(run=run).values_list("call_id", "attempt"))
        assert len(receipts) == len(set(receipts))
        assert types.count("run_started") == 1
        # Wherever the worker died, the run completes: an interrupted check runs again.
        assert run.outcome == "complete", (trial, run.outcome, run.stop_message, trace_of(run))
        # The report tells the truth about the external effect: a publish that the
        # worker died before performing is reconciled as not applied, not assumed.
        assert len(published) <= 1
        assert len(published) == len(run.report.data["effects_applied"])
        if not published:
            not_applied += 1
    summary = {
        "trials": TRIALS,
        "seconds_to_approval_wait": round(before_span, 1),
        "seconds_after_grant": round(after_span, 1),
        "outcomes": dict(outcomes),
        "calls_in_flight_when_killed": dict(interrupted),
        "publishes_reconciled_as_not_performed": not_applied,
        "duplicate_publishes": duplicates,
    }
    print("\nfault suite:", json.dumps(summary))
    Path(settings.VAR_DIR, "fault_suite.json").write_text(json.dumps(summary, indent=2))
    assert duplicates == 0


def test_it_pushes_at_most_once_when_the_worker_is_killed_mid_push(
    transactional_db: None, operator: User, reviewer: User, settings: Settings, tmp_path: Path
) -> None:
    """SIGKILL of the worker (and its git) while the push is held at the proxy. The
    held push then reaches the server (the server accepted what a dead client sent)
    or never does; the new worker's ls-remote of the branch decides, and the run's
    report says which. The branch moves at most once."""
    from tests.remote_runs import parked, remote_rig

    measured = []
    with remote_rig(tmp_path / "remote", settings) as rig:
        for lands in (True, False):
            rig.proxy.push_arrived.clear()
            rig.proxy.discard_push = not lands
            run = create_run(rig.contract(), SCRIPTED_DEMO, operator)
            run = parked(wait_for(run, ("waiting_approval",), timeout=120, log=rig.worker.log))
            rig.proxy.hold_push.set()
            grant(ApprovalRequest.objects.get(run=run, status="pending"), reviewer)
            assert rig.proxy.push_arrived.wait(60), "the push never reached the proxy"
            pushes_before = len(rig.server.pushes)
            rig.worker.kill()
            lookups_before = rig.lookups()
            rig.proxy.hold_push.clear()
            branch = rig.branch_of(run)
            if lands:
                deadline = time.monotonic() + 30
                while rig.head(branch) is None:
                    assert time.monotonic() < deadline, "the held push never landed"
                    time.sleep(0.05)
            rig.worker.start()
            run = finish(run, reviewer, rig.worker)
            types = assert_gap_free(run)
            assert run.outcome == "complete", (run.outcome, run.stop_message, trace_of(run))
            reconciled = Event.objects.get(run=run, type="effect_reconciled")
            applied = run.report.data["effects_applied"]
            assert rig.updates(branch) == (1 if lands else 0), "the branch moves at most once"
            assert reconciled.payload["applied"] is lands and len(applied) == (1 if lands else 0), reconciled.payload
            assert ("is at our commit" if lands else "is absent") in reconciled.payload["detail"]
            assert "run_resumed" in types and len(rig.server.pushes) == pushes_before + (1 if lands else 0)
            measured.append(
                {
                    "push_landed_after_kill": lands,
                    "branch_updates": rig.updates(branch),
                    "pushes_reaching_server": len(rig.server.pushes) - pushes_before,
                    "ls_remote_after_restart": rig.lookups() - lookups_before,
                    "reconciled_applied": reconciled.payload["applied"],
                    "outcome": run.outcome,
                }
            )
    print("\nkilled mid-push:", json.dumps(measured))
    Path(settings.VAR_DIR, "fault_mid_push.json").write_text(json.dumps(measured, indent=2))
