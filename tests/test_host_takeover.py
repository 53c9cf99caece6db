"""A worker host dies and its runs go on elsewhere, with no shared storage (issue 28).

Two worker hosts with real parts (tests/two_hosts.py): Celery workers named host-a and
host-b, each with its own data directory and Docker engine (host A's a dockerd this
module starts), one PostgreSQL, one Redis; this test process is the web process, with
a data directory of its own that no run's workspace ever reaches. A run starts on host
A; at a chosen point host A's worker is SIGKILLed and its engine stopped; host B
takes the run over once the lease and the host's heartbeat run out, rebuilds the
workspace from the source and the recorded writes, verifies the revision, and the run
ends with the report a run of the same script has on one host. The figures (takeover
and rebuild times) go to ``host_takeover.json`` in the session's var directory, for
docs/reliability.md."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from celery import current_app
from django.conf import settings
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse
from pytest_django import Settings
from rest_framework.test import APIClient

from api.models import ApiToken
from approvals.models import ApprovalRequest, PolicyVersion
from approvals.policies import current_policy_row
from runs.approval_flow.flow import grant
from runs.models import Event, Evidence, PublishedPatch, Run, WorkerHost
from runs.runtime import create_run
from runs.scheduling import hosts
from runs.services import report_of
from tests.gitserver import sh
from tests.runs_waiting import DEMO_CONTRACT, DEMO_SCRIPT, assert_gap_free, wait_for
from tests.two_hosts import Engine, Host

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.docker, pytest.mark.celery, pytest.mark.slow, pytest.mark.postgres_only]

ROOT = Path(__file__).resolve().parent.parent
FIGURES: list[dict[str, Any]] = []
SLOW_SECONDS = 6
PATCH_STEP, CHECK_STEP = DEMO_SCRIPT[1], DEMO_SCRIPT[2]
SLOW_STEP = {"tool": "run_check", "args": {"check_id": "slow"}}
FINISH = {"tool": "finish", "args": {"summary": "order_total rejects negative quantities; tests pass"}}
# Read, write, a slow check (the kill lands after the write, or inside the check), the tests, finish.
WRITE_THEN_CHECK = [DEMO_SCRIPT[0], PATCH_STEP, SLOW_STEP, CHECK_STEP, FINISH]
# The demo: read, write, the tests, publish (a reviewer is asked), finish.
PUBLISH = DEMO_SCRIPT
REPORT_PARTS = ("status", "completed", "base_revision", "revision", "changed_files", "pending", "limitations", "policy_version")


@pytest.fixture(scope="module")
def two_hosts(django_db_setup: None, django_db_blocker: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Host, Host]]:
    if os.geteuid() != 0:
        pytest.fail("host A's engine is a dockerd of this test's own, which needs root")
    engine = Engine(Path(f"/run/harness-host-a-{os.getpid()}"), Path(f"/var/lib/harness-host-a-{os.getpid()}"))
    engine.root.mkdir(parents=True, exist_ok=True)
    base = tmp_path_factory.mktemp("hosts")
    (base / "remotes").mkdir()
    # Both hosts may clone from and push to the git remotes under remotes/.
    remotes = f"file://{base / 'remotes'}/"
    host_a = Host("host-a", base / "a", engine, HARNESS_GIT_ALLOWED_REMOTES=remotes)
    host_b = Host("host-b", base / "b", HARNESS_GIT_ALLOWED_REMOTES=remotes)
    try:
        engine.start()
        engine.load_sandbox_image()
        purge_host_queues()
        host_a.start()
        host_b.start()
        yield host_a, host_b
    finally:
        host_a.worker.stop()
        host_b.worker.stop()
        engine.remove(settings.SANDBOX_SCOPE)
        purge_host_queues()
        out = Path(settings.VAR_DIR) / "host_takeover.json"
        out.write_text(json.dumps(FIGURES, indent=2))
        print(f"\nhost takeover figures: {out}\n" + "\n".join(json.dumps(f) for f in FIGURES))


def purge_host_queues() -> None:
    """The session's queues, the hosts' own and their bindings: a killed worker's
    unacknowledged wake-ups come back to its host's queue once their visibility
    timeout ends, and nothing of this module may stay behind in Redis."""
    client = redis.Redis.from_url(settings.REDIS_URL)
    queue = settings.CELERY_TASK_DEFAULT_QUEUE
    keys = [queue, *client.scan_iter(f"{hosts.host_queue('*')}"), *client.scan_iter(f"_kombu.binding*.{hosts.host_queue('*')}")]
    client.delete(*keys)
    # kombu keeps a message taken but not acknowledged in one hash for the whole
    # Redis database, as [message, exchange, routing key]: this session's go.
    for tag, raw in client.hscan_iter("unacked"):
        routing_key = json.loads(raw)[2]
        if routing_key == queue or routing_key.startswith(f"{queue}.host."):
            client.hdel("unacked", tag)
            client.zrem("unacked_index", tag)


@pytest.fixture
def hosts_up(two_hosts: tuple[Host, Host], transactional_db: None) -> tuple[Host, Host]:
    """Both hosts alive (host A again after the last case killed it), a policy with
    the slow check."""
    for host in two_hosts:
        host.start()
    row = current_policy_row()
    document = dict(row.document)
    document["checks"] = [*document["checks"], {"check_id": "slow", "command": ["sleep", str(SLOW_SECONDS)], "timeout_seconds": 120}]
    PolicyVersion.objects.create(version=row.version + 1, document={**document, "version": row.version + 1}, note="a slow check")
    deadline = time.monotonic() + 30
    while not (hosts.alive("host-a") and hosts.alive("host-b")):
        assert time.monotonic() < deadline, "the hosts' heartbeats never came"
        time.sleep(0.2)
    return two_hosts


def start_on(host: Host, script: list[dict[str, Any]], operator: User, workspace: dict[str, Any] | None = None) -> Run:
    """Created as the web process creates a run (nothing prepared), then handed to
    ``host``'s own queue: the test decides which host the run starts on."""
    contract = {**DEMO_CONTRACT, "verification_targets": ["tests"], "task_id": f"takeover-{len(FIGURES)}-{host.name}"}
    if workspace is not None:
        contract["workspace"] = workspace
    run = create_run(contract, {"kind": "scripted", "script": script}, operator, enqueue=False)
    current_app.send_task("runs.start_run", args=[str(run.pk)], queue=hosts.host_queue(host.name))
    return run


def until(what: str, found: Callable[[], Any], seconds: float = 90, log: Callable[[], str] = lambda: "") -> Any:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        value = found()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"no {what} after {seconds} s\n{log()[-4000:]}")


def finish(run: Run, reviewer: User, log: Callable[[], str]) -> Run:
    """Wait for the run to end, granting what it asks for."""
    while True:
        run = wait_for(run, ("waiting_approval", "complete", "stopped"), timeout=180, log=log)
        if run.status != "waiting_approval":
            return run
        pending = ApprovalRequest.objects.filter(run=run, status="pending").first()
        if pending is not None:
            grant(pending, reviewer)
        until("the run to leave its wait", lambda: Run.objects.get(pk=run.pk).status != "waiting_approval", log=log)


def report_parts(run: Run) -> dict[str, Any]:
    report = report_of(run)
    parts = {k: report[k] for k in REPORT_PARTS}
    parts["effects_applied"] = len(report["effects_applied"])
    parts["current_evidence"] = sorted((check, e["passed"], e["revision"]) for check, e in report["current_evidence"].items())
    return parts


def one_host(host: Host, script: list[dict[str, Any]], operator: User, reviewer: User) -> dict[str, Any]:
    """The report the same script has on one host, nobody killed."""
    run = finish(start_on(host, script, operator), reviewer, host.log)
    assert run.outcome == "complete", run.stop_message
    return report_parts(run)


def taken_over(run: Run, killed_at: float, a: Host, b: Host, case: str) -> Event:
    """The rebuild's record on host B, and its figures."""
    resumed: Event = until(
        "host B's rebuild",
        lambda: next((e for e in Event.objects.filter(run=run, type="run_resumed") if "rebuilt on host-b" in e.payload["reason"]), None),
        log=lambda: f"{a.log()[-1500:]}\n{b.log()[-1000:]}\n{the_run(run)}",
    )
    reason = resumed.payload["reason"]
    assert f"its host {a.name} is gone" in reason and "revision" in reason, reason
    rebuild = re.search(r"in ([0-9.]+) s;", reason)
    assert rebuild is not None, reason
    FIGURES.append(
        {
            "case": case,
            "takeover_seconds": round(resumed.ts.timestamp() - killed_at, 2),
            "rebuild_seconds": float(rebuild.group(1)),
            "lease_seconds": 4,
        }
    )
    return resumed


def the_run(run: Run) -> str:
    row = Run.objects.filter(pk=run.pk).values("status", "outcome", "host", "lease_owner", "lease_expires_at", "lease_token").first()
    events = list(Event.objects.filter(run=run).order_by("seq").values_list("seq", "type"))
    return f"run {row}, hosts {list(WorkerHost.objects.values_list('name', 'expires_at'))}, events {events}"


def assert_moved(run: Run, a: Host, b: Host) -> None:
    run_id = str(run.pk)
    assert a.workspace(run_id).is_dir() and b.workspace(run_id).is_dir()  # prepared on A, rebuilt on B
    assert not (Path(settings.WORKSPACE_ROOT) / run_id).exists()  # the web process's own disk: never
    run.refresh_from_db()
    assert run.host == "host-b"
    types = assert_gap_free(run)
    assert types.count("stopped") == 1
    assert all(e.payload["valid"] for e in Event.objects.filter(run=run, type="receipt_recorded"))


@pytest.mark.parametrize("point", ["after_write", "during_check"])
def test_it_rebuilds_on_host_b_after_host_a_dies_and_ends_as_on_one_host(
    hosts_up: tuple[Host, Host], operator: User, reviewer: User, point: str
) -> None:
    a, b = hosts_up
    expected = one_host(b, WRITE_THEN_CHECK, operator, reviewer)
    run = start_on(a, WRITE_THEN_CHECK, operator)
    if point == "after_write":
        until(
            "the write's receipt",
            lambda: Event.objects.filter(run=run, type="receipt_recorded", payload__tool="apply_patch").exists(),
            log=a.log,
        )
    else:
        until("the slow check", lambda: Event.objects.filter(run=run, type="call_started", payload__tool="run_check").exists(), log=a.log)
        time.sleep(1.5)  # inside the check, in host A's container
    run.refresh_from_db()
    assert run.host == "host-a" and run.status == "running"
    killed_at = a.die()
    taken_over(run, killed_at, a, b, point)
    run = finish(run, reviewer, b.log)
    assert run.outcome == "complete", run.stop_message
    assert report_parts(run) == expected
    assert_moved(run, a, b)
    served_with_no_worker_disk(run, a, b, operator)


def served_with_no_worker_disk(run: Run, a: Host, b: Host, viewer: User) -> None:
    """A finished run's pages, report and artifacts come from the database alone: every
    worker host's data directory deleted, the web process serves them all."""
    refs = sorted({ref for ref in Evidence.objects.filter(run=run).values_list("output_ref", flat=True) if ref})
    assert refs, "the check left its output as an artifact"
    for host in (a, b):
        shutil.rmtree(host.data)
    page, api = Client(), APIClient()
    page.force_login(viewer)
    api.credentials(HTTP_AUTHORIZATION=f"Token {ApiToken.issue(viewer)[1]}")
    assert page.get(reverse("runs:detail", args=[run.pk])).status_code == 200
    assert page.get(reverse("runs:report", args=[run.pk])).status_code == 200
    for ref in refs:
        shown = page.get(reverse("runs:artifact", args=[run.pk, ref]))
        assert shown.status_code == 200, ref
        download = api.get(f"/api/runs/{run.pk}/artifacts/{ref}/")
        assert download.status_code == 200, ref


def test_it_resumes_a_wait_on_host_b_with_the_approval_bound_and_one_effect(
    hosts_up: tuple[Host, Host], operator: User, reviewer: User
) -> None:
    a, b = hosts_up
    expected = one_host(b, PUBLISH, operator, reviewer)
    run = start_on(a, PUBLISH, operator)
    run = wait_for(run, ("waiting_approval", "complete", "stopped"), timeout=120, log=a.log)
    assert run.status == "waiting_approval" and run.host == "host-a", run.outcome
    request = ApprovalRequest.objects.get(run=run, status="pending")
    killed_at = a.die()
    # The reviewer decides at once: the wake-up goes to host A's queue while its
    # heartbeat lasts, then the sweeps send it to the shared queue, where host B claims it.
    grant(request, reviewer)
    taken_over(run, killed_at, a, b, "waiting_approval")
    run = finish(run, reviewer, b.log)
    assert run.outcome == "complete", run.stop_message
    assert report_parts(run) == expected
    assert_moved(run, a, b)
    request.refresh_from_db()
    assert request.status == "consumed" and request.revision == run.revision  # bound to the revision rebuilt and verified
    assert PublishedPatch.objects.filter(run_id=str(run.pk)).count() == 1
    assert list(Event.objects.filter(run=run).values_list("type", flat=True)).count("approval_consumed") == 1


def test_it_resumes_a_run_on_its_own_host_while_it_lives_and_rebuilds_a_wiped_copy_there(
    hosts_up: tuple[Host, Host], operator: User, reviewer: User
) -> None:
    a, b = hosts_up
    sticky = start_on(a, PUBLISH, operator)
    wiped = start_on(a, PUBLISH, operator)
    for run in (sticky, wiped):
        run = wait_for(run, ("waiting_approval", "complete", "stopped"), timeout=120, log=a.log)
        assert run.status == "waiting_approval" and run.host == "host-a", run.outcome
    # Host A's disk is a cache: one run's copy is wiped while it waits.
    shutil.rmtree(a.workspace(str(wiped.pk)))
    for run in (sticky, wiped):
        # Both hosts are alive; the wake-ups go to host A's own queue.
        grant(ApprovalRequest.objects.get(run=run, status="pending"), reviewer)
    for run in (sticky, wiped):
        run = wait_for(run, ("complete", "stopped"), timeout=120, log=a.log)
        assert run.outcome == "complete" and run.host == "host-a", run.stop_message
        assert not b.workspace(str(run.pk)).exists()  # host B never had it
        assert_gap_free(run)
    resumed = [e.payload["reason"] for e in Event.objects.filter(run=sticky, type="run_resumed")]
    assert resumed == []  # resumed with its workspace as it was: no rebuild
    rebuilt = [e.payload["reason"] for e in Event.objects.filter(run=wiped, type="run_resumed")]
    assert len(rebuilt) == 1 and "rebuilt on host-a (this host's copy was gone or behind)" in rebuilt[0], rebuilt


def git_remote(root: Path) -> Path:
    """A bare repository holding examples/orders on ``main``: a real git remote."""
    work, bare = root / "orders-work", root / "orders.git"
    shutil.copytree(ROOT / "examples/orders", work, ignore=shutil.ignore_patterns("__pycache__", ".pytest_cache"))
    sh("init", "--quiet", "--initial-branch=main", str(work))
    sh("add", "-A", cwd=work)
    sh("commit", "--quiet", "-m", "orders", cwd=work)
    sh("init", "--quiet", "--bare", "--initial-branch=main", str(bare))
    sh("push", "--quiet", str(bare), "main", cwd=work)
    return bare


def hold_first_push(bare: Path, hook: str) -> Path:
    """The remote holds the first push inside ``hook`` (pre-receive: nothing landed yet;
    post-receive: the branch is there, the pusher not yet told) so the test kills host A
    at that moment whatever the machine's load; later pushes pass. The hold is bounded
    (120 s) and dies with host A's process group, which the push runs in. Returns the
    path that appears once the first push is held."""
    held = bare / "held"
    script = bare / "hooks" / hook
    script.write_text(
        "#!/bin/sh\n"
        "cat >/dev/null\n"
        f"if mkdir '{held}' 2>/dev/null; then\n"
        "  n=0; while [ $n -lt 1200 ]; do sleep 0.1; n=$((n+1)); done\n"
        "fi\n"
    )
    script.chmod(0o755)
    return held


@pytest.mark.parametrize("moment", ["publish_started", "branch_pushed"])
def test_it_publishes_to_a_git_remote_at_most_once_when_host_a_dies_during_the_publish(
    hosts_up: tuple[Host, Host], operator: User, reviewer: User, settings: Settings, moment: str
) -> None:
    a, b = hosts_up
    remotes = a.data.parent.parent / "remotes"
    settings.GIT_ALLOWED_REMOTES = [f"file://{remotes}/"]
    bare = git_remote(Path(tempfile.mkdtemp(dir=remotes)))
    run = start_on(a, PUBLISH, operator, {"kind": "git", "url": f"file://{bare}", "ref": "main"})
    run = wait_for(run, ("waiting_approval", "complete", "stopped"), timeout=120, log=a.log)
    assert run.status == "waiting_approval" and run.host == "host-a", (run.outcome, run.stop_message)
    branch = f"refs/heads/harness/{run.task_id}-{str(run.pk)[:8]}"
    held = hold_first_push(bare, "pre-receive" if moment == "publish_started" else "post-receive")
    grant(ApprovalRequest.objects.get(run=run, status="pending"), reviewer)
    until("host A's push at the remote", held.exists, log=a.log)
    on_remote = subprocess.run(["git", "rev-parse", "--verify", "--quiet", branch], cwd=bare, capture_output=True).returncode == 0
    # publish_started: the push is in flight, not landed; branch_pushed: landed, its receipt not recorded.
    assert on_remote == (moment == "branch_pushed")
    killed_at = a.die()
    taken_over(run, killed_at, a, b, moment)
    run = finish(run, reviewer, b.log)
    assert run.outcome == "complete", run.stop_message
    assert_moved(run, a, b)
    pushed = subprocess.run(["git", "rev-parse", "--verify", "--quiet", branch], cwd=bare, capture_output=True, text=True)
    report = report_of(run)
    # The push happened or it did not; either way once, and the report says which.
    assert pushed.returncode == 0 or moment == "publish_started"
    assert len(report["effects_applied"]) == (1 if pushed.returncode == 0 else 0), (report, pushed)
    if pushed.returncode == 0:
        commits = sh("rev-list", "--count", f"main..{branch}", cwd=bare)
        assert commits == "1"  # one commit on the run's branch: not pushed twice
        assert sh("log", "-1", "--format=%T", branch, cwd=bare) == run.revision  # exactly the tree rebuilt and verified
    FIGURES[-1]["branch_pushed"] = pushed.returncode == 0
    FIGURES[-1]["pushed_before_the_kill"] = bool(
        Event.objects.filter(run=run, type="receipt_recorded", payload__tool="publish", seq__lt=min_resumed_seq(run)).exists()
    )


def min_resumed_seq(run: Run) -> int:
    seqs = [e.seq for e in Event.objects.filter(run=run, type="run_resumed") if "rebuilt on host-b" in e.payload["reason"]]
    return min(seqs)
