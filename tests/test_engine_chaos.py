"""The sandbox engine misbehaving under real runs (issue 20).

A second Docker engine is started for this module (its own data root, exec root, pid
file and socket under /run/harness-chaos-<pid>/, no iptables or bridge), with the
sandbox image loaded into it; each case drives a real ``run_task`` process whose
sandbox is that engine, and breaks the engine, the run's container or its image.
The main engine is never touched.

Every case asserts the outcome (retried and complete, or stopped
``sandbox_unavailable``), that nothing but a check that ran to its end became
evidence, a gap-free event log, and no traceback from the command. The figures of
each case (retries, time to recover) are written to ``engine_chaos.json`` in the
session's var directory, for docs/reliability.md."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import docker
import pytest
from django.conf import settings
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse
from docker.errors import DockerException

from approvals.models import PolicyVersion
from approvals.policies import current_policy_row
from runs.models import Event, Run
from sandbox.container.orphans import sweep_orphans
from sandbox.container.spec import LABEL_RUN
from tests.fixtures_services import service_env
from tests.two_hosts import Engine

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.docker]

T = TypeVar("T")

ROOT = Path(__file__).resolve().parent.parent
SCOPE = f"chaos-{os.getpid()}"
SLEEP_SECONDS = 5
SLOW = ["python3", "-c", f"import time; time.sleep({SLEEP_SECONDS}); print('slept')"]
HOG = ["python3", "-c", "hoard = []\nwhile True:\n    hoard.append(b'x' * 10_000_000)\n"]
KEEP_TAG = "harness-sandbox:chaos-keep"
FIGURES: list[dict[str, Any]] = []


class ChaosEngine(Engine):
    """A dockerd of its own that the tests stop, start and break at will."""

    def client(self, timeout: int = 30) -> docker.DockerClient:
        return docker.DockerClient(base_url=self.host, timeout=timeout)


@pytest.fixture(scope="module")
def chaos(docker_engine: docker.DockerClient) -> Iterator[ChaosEngine]:
    if os.geteuid() != 0:
        pytest.fail("the engine chaos suite starts its own dockerd and needs root")
    root = Path(f"/run/harness-chaos-{os.getpid()}")
    data_root = Path(f"/var/lib/harness-chaos-{os.getpid()}")
    root.mkdir(parents=True, exist_ok=True)
    engine = ChaosEngine(root, data_root)
    engine.start()
    try:
        engine.load_sandbox_image()
        engine.client().images.get(settings.SANDBOX_IMAGE).tag(KEEP_TAG)
        yield engine
    finally:
        if engine.up():
            sweep_orphans([], scope=SCOPE, client=engine.client())
        engine.stop()
        shutil.rmtree(data_root, ignore_errors=True)
        shutil.rmtree(root, ignore_errors=True)
        out = Path(settings.VAR_DIR) / "engine_chaos.json"
        out.write_text(json.dumps(FIGURES, indent=2))
        print(f"\nengine chaos figures: {out}\n" + "\n".join(json.dumps(f) for f in FIGURES))


@pytest.fixture
def engine(chaos: ChaosEngine, db: None) -> ChaosEngine:
    """The chaos engine, up and with the sandbox image, and a policy with the checks
    the cases need."""
    if not chaos.up():
        chaos.start()
    chaos.client().images.get(KEEP_TAG).tag(settings.SANDBOX_IMAGE)
    document = current_policy_row().document
    document["checks"] = [
        *document["checks"],
        {"check_id": "slow", "command": SLOW, "version": "1", "timeout_seconds": 60},
        {"check_id": "hog", "command": HOG, "version": "1", "timeout_seconds": 60},
    ]
    document["sandbox"] = {**document["sandbox"], "memory": "256m"}
    PolicyVersion.objects.create(version=current_policy_row().version + 1, document=document, note="engine chaos")
    return chaos


@dataclass
class Finished:
    code: int
    report: dict[str, Any]
    stderr: str
    run: Run

    def events(self, kind: str) -> list[dict[str, Any]]:
        return [e for e in self.report["events"] if e["type"] == kind]


class RunTask:
    """``manage.py run_task`` in its own process, its sandbox on the chaos engine."""

    def __init__(self, engine: ChaosEngine, tmp: Path, task_id: str, check: str, **limits: int) -> None:
        contract = {
            "task_id": task_id,
            "objective": "run one check while the sandbox engine misbehaves",
            "acceptance_criteria": ["the check runs to its end"],
            "workspace": {"kind": "path", "path": "examples/orders"},
            "allowed_write_paths": ["orders/*"],
            "allowed_tools": ["run_check", "finish"],
            "verification_targets": [check],
            "limits": {
                "max_proposals": 10,
                "max_tool_calls": 10,
                "max_attempts": 5,
                "wall_time_seconds": 120,
                "max_output_bytes_per_call": 100_000,
                **limits,
            },
        }
        script = [{"tool": "run_check", "args": {"check_id": check}}, {"tool": "finish", "args": {"summary": "checked"}}]
        (tmp / "contract.json").write_text(json.dumps(contract))
        (tmp / "script.json").write_text(json.dumps(script))
        self.task_id = task_id
        self.engine = engine
        self.out = open(tmp / "stdout", "w+b")  # noqa: SIM115 - closed in finish
        self.err = open(tmp / "stderr", "w+b")  # noqa: SIM115 - closed in finish
        self.started = time.time()
        self.proc = subprocess.Popen(
            [sys.executable, "manage.py", "run_task", str(tmp / "contract.json"), "--script", str(tmp / "script.json"), "--json"],
            cwd=ROOT,
            env=service_env(DOCKER_HOST=engine.host, HARNESS_SANDBOX_SCOPE=SCOPE, HARNESS_RETRY_BASE_SECONDS="0.5"),
            stdout=self.out,
            stderr=self.err,
        )

    def until(self, what: str, found: Callable[[], T | None], seconds: float = 60) -> T:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            value = found()
            if value:
                return value
            if self.proc.poll() is not None:
                self.out.seek(0)
                raise AssertionError(f"run_task ended before {what}: {self._stderr()[-3000:]} {self.out.read()[-3000:]!r}")
            time.sleep(0.1)
        raise AssertionError(f"no {what} after {seconds}s: {self._stderr()[-3000:]}")

    def run(self) -> Run:
        return self.until("run", lambda: Run.objects.filter(task_id=self.task_id).first())

    def event(self, kind: str) -> Event:
        run = self.run()
        return self.until(kind, lambda: Event.objects.filter(run=run, type=kind).order_by("seq").first())

    def check_running(self) -> docker.models.containers.Container:
        """The run's container once the slow check is sleeping in it."""
        run_id = str(self.run().pk)
        client = self.engine.client()

        def sleeping() -> Any:
            for container in client.containers.list(filters={"label": f"{LABEL_RUN}={run_id}"}):
                try:
                    processes = container.top().get("Processes") or []
                except DockerException:  # not started yet, or stopped since the listing
                    continue
                # The execution wrapper: only the check runs in this container.
                if any("timeout -s KILL" in " ".join(p) for p in processes):
                    return container
            return None

        return self.until("the check running", sleeping)

    def finish(self, seconds: float = 120) -> Finished:
        try:
            code = self.proc.wait(seconds)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
            self.out.seek(0)
            stdout = self.out.read().decode()
            stderr = self._stderr()
            self.out.close()
            self.err.close()
        assert "Traceback" not in stderr, stderr
        report = json.loads(stdout)
        return Finished(code, report, stderr, Run.objects.get(pk=report["run_id"]))

    def _stderr(self) -> str:
        self.err.seek(0)
        return self.err.read().decode(errors="replace")


def assert_sound(done: Finished, outcome: str) -> None:
    """The outcome, a gap-free log, no rejected receipt, no evidence but a passing one."""
    assert done.report["status"] == outcome, (done.report["message"], [e["type"] for e in done.report["events"]], done.stderr)
    assert done.code == (0 if outcome == "complete" else 1)
    seqs = list(Event.objects.filter(run=done.run).order_by("seq").values_list("seq", flat=True))
    assert seqs == list(range(1, len(seqs) + 1)) and seqs[-1] == done.run.last_seq
    assert all(e["payload"]["valid"] for e in done.events("receipt_recorded"))
    assert all(e["passed"] for e in done.report["evidence"]), done.report["evidence"]
    assert "receipt_invalid" not in json.dumps(done.report["events"])


def infrastructure_retries(done: Finished) -> list[str]:
    return [e["payload"]["reason"] for e in done.events("retry") if "the sandbox failed, not the call" in e["payload"]["reason"]]


def record(case: str, done: Finished, disrupted_at: float | None, **extra: float) -> None:
    evidence = done.events("evidence_recorded")
    recovered = None
    if disrupted_at is not None and evidence:
        # From the disruption to the start of the attempt that ran to its end.
        duration = done.report["evidence"][-1]["duration_ms"] / 1000
        recovered = round(_ts(evidence[-1]) - duration - disrupted_at, 1)
    FIGURES.append(
        {
            "case": case,
            "outcome": done.report["status"],
            "retries": len(done.events("retry")),
            "waited_for_engine": [e["payload"]["waited_seconds"] for e in done.events("sandbox_wait_over")],
            "seconds_to_recover": recovered,
            "run_seconds": round(_ts(done.report["events"][-1]) - _ts(done.report["events"][0]), 1),
            **extra,
        }
    )


def _ts(event: dict[str, Any]) -> float:
    from datetime import datetime

    return datetime.fromisoformat(event["ts"]).timestamp()


# -- the container fails under a running check ---------------------------------


def test_it_retries_in_a_fresh_container_when_the_engine_restarts_mid_check(engine: ChaosEngine, tmp_path: Path) -> None:
    task = RunTask(engine, tmp_path, "chaos-restart", "slow")
    first = task.check_running()
    disrupted_at = time.time()
    engine.stop()
    time.sleep(1)
    engine.start()
    engine_down = round(time.time() - disrupted_at, 1)
    done = task.finish()
    assert_sound(done, "complete")
    assert infrastructure_retries(done), done.events("retry")
    [evidence] = done.report["evidence"]
    assert evidence["passed"] is True
    assert not engine.client().containers.list(all=True, filters={"id": first.id})
    record("engine restarted mid-check", done, disrupted_at, engine_down_seconds=engine_down)


@pytest.mark.parametrize("how", ["rm -f", "kill -9"])
def test_it_retries_when_the_container_is_removed_or_killed_from_outside(engine: ChaosEngine, tmp_path: Path, how: str) -> None:
    task = RunTask(engine, tmp_path, f"chaos-{how.replace(' ', '')}", "slow")
    container = task.check_running()
    disrupted_at = time.time()
    if how == "rm -f":
        container.remove(force=True)
    else:
        os.kill(container.attrs["State"]["Pid"], signal.SIGKILL)  # the container's init, from the host
    done = task.finish()
    assert_sound(done, "complete")
    [reason] = infrastructure_retries(done)
    assert "not by the harness" in reason or "no longer exists" in reason, reason
    failed = [e for e in done.events("receipt_recorded") if e["payload"]["receipt"]["status"] == "transient"]
    assert failed and "exit_code" not in failed[0]["payload"]["receipt"]["data"]
    record(f"container {how} mid-check", done, disrupted_at)


def test_it_keeps_a_check_that_hits_its_own_memory_limit_as_a_failed_check(engine: ChaosEngine, tmp_path: Path) -> None:
    task = RunTask(engine, tmp_path, "chaos-hog", "hog", max_proposals=1)
    done = task.finish()
    assert done.report["status"] == "budget_exhausted"  # the model has no proposal left to react
    [evidence] = done.report["evidence"]
    assert evidence["passed"] is False and evidence["exit_code"] == 137
    [receipt] = done.events("receipt_recorded")
    assert receipt["payload"]["receipt"]["status"] == "ok" and receipt["payload"]["receipt"]["data"]["oom_killed"] is True
    assert done.events("retry") == []
    record("check hits its own memory limit (contrast)", done, None)


# -- the image is missing ---------------------------------------------------------


def test_it_retries_a_check_whose_image_is_missing_until_it_is_back(engine: ChaosEngine, tmp_path: Path) -> None:
    engine.client().images.remove(settings.SANDBOX_IMAGE)  # untags: the content stays under KEEP_TAG
    task = RunTask(engine, tmp_path, "chaos-image", "slow")
    task.event("retry")
    disrupted_at = time.time()
    engine.client().images.get(KEEP_TAG).tag(settings.SANDBOX_IMAGE)
    done = task.finish()
    assert_sound(done, "complete")
    assert all(f"{settings.SANDBOX_IMAGE} not found" in reason for reason in infrastructure_retries(done))
    record("image removed before the check, back after the first retry", done, disrupted_at)


def test_it_stops_sandbox_unavailable_when_the_image_stays_missing(engine: ChaosEngine, tmp_path: Path) -> None:
    engine.client().images.remove(settings.SANDBOX_IMAGE)
    done = RunTask(engine, tmp_path, "chaos-no-image", "slow", max_attempts=3).finish()
    assert_sound(done, "sandbox_unavailable")
    assert f"{settings.SANDBOX_IMAGE} not found" in done.report["message"] and done.report["evidence"] == []
    assert len(infrastructure_retries(done)) == 2
    record("image removed for good", done, None)


# -- the engine is down -----------------------------------------------------------


def test_it_waits_for_an_engine_that_is_down_when_the_run_starts(
    engine: ChaosEngine, tmp_path: Path, client: Client, operator: User
) -> None:
    engine.stop()
    task = RunTask(engine, tmp_path, "chaos-down-at-start", "slow")
    waiting = task.event("sandbox_waiting")
    # What the operator sees meanwhile.
    client.force_login(operator)
    page = client.get(reverse("runs:detail", args=[task.run().pk])).content.decode()
    chip = page[page.index('data-field="sandbox-waiting"') :].split(">", 1)[0]
    assert "hidden" not in chip and "did not answer" in chip
    time.sleep(max(0.0, 10 - (time.time() - task.started)))
    engine.start()
    back_at = time.time()
    done = task.finish()
    assert_sound(done, "complete")
    [over] = done.events("sandbox_wait_over")
    assert over["payload"]["engine_back"] is True and waiting.payload["reason"]
    assert done.events("retry") == []  # the attempt waited; it did not fail
    record("engine down at run start, back 10 s later", done, back_at)


def test_it_stops_a_run_waiting_for_the_engine_on_the_kill_switch(engine: ChaosEngine, tmp_path: Path, operator: User) -> None:
    from runs.control import kill

    engine.stop()
    task = RunTask(engine, tmp_path, "chaos-kill-waiting", "slow")
    task.event("sandbox_waiting")
    killed_at = time.time()
    assert kill(task.run(), operator)
    done = task.finish(30)
    assert done.report["status"] == "killed" and done.code == 1
    assert done.report["evidence"] == []
    FIGURES.append(
        {"case": "kill switch while waiting for the engine", "outcome": "killed", "seconds_to_stop": round(time.time() - killed_at, 1)}
    )


def test_it_stops_sandbox_unavailable_when_the_engine_stays_down_past_the_deadline(engine: ChaosEngine, tmp_path: Path) -> None:
    engine.stop()
    task = RunTask(engine, tmp_path, "chaos-down-for-good", "slow", wall_time_seconds=12)
    done = task.finish(60)
    assert_sound(done, "sandbox_unavailable")
    assert "did not answer" in done.report["message"] and done.report["evidence"] == []
    [over] = done.events("sandbox_wait_over")
    assert over["payload"]["engine_back"] is False
    record("engine down longer than the deadline (12 s)", done, None)
