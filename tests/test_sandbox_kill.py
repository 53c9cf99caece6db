"""Killing a run during a check (tests/sandbox_threats.py): the container goes, and a
slow engine does not hold the stop up."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from docker.errors import NotFound

from sandbox.executor import SandboxExecutor
from sandbox.tools.context import ToolSettings
from tests.fixtures_runtimes import RuntimeEngine
from tests.fixtures_sandbox import (
    SURVIVE,
    TEST_LIMITS,
    WRITE_PATHS,
    Outcome,
    drive,
    example_workspace,
    sandbox_policy,
    start_container,
    step,
)
from tests.sandbox_threats import check

pytestmark = [pytest.mark.docker]


class KillSwitch:
    def __init__(self) -> None:
        self.flag = threading.Event()

    def kill_requested(self) -> bool:
        return self.flag.is_set()


LONG = check("long", "sleep", "600", timeout=600)


def kill_during_long_check(executor: SandboxExecutor, returned: threading.Event | None = None) -> Outcome:
    """Drive a check that would run 600 s, kill it after a second: the loop returns
    killed, and well before the check's own end, at any load (bench/kill_latency.py
    measures how soon). ``returned`` is set once the loop has returned, before the
    kill's own thread is waited for."""
    switch = KillSwitch()

    def operator() -> None:
        time.sleep(1.0)
        switch.flag.set()
        executor.kill()

    thread = threading.Thread(target=operator)
    thread.start()
    outcome = drive(executor, sandbox_policy(LONG), [step("run_check", check_id="long"), *SURVIVE], controls=switch)
    if returned is not None:
        returned.set()
    thread.join()
    assert outcome.state.outcome == "killed"
    receipt = outcome.receipt("run_check", "long")
    assert receipt["status"] == "unknown" and receipt["data"]["error"] == "the sandbox was killed during the check"
    assert outcome.seconds < LONG.timeout_seconds
    assert not outcome.state.evidence  # a cut-off check proves nothing
    return outcome


def test_it_kills_an_execution_in_flight_and_removes_the_container(runtime_engine: RuntimeEngine, tmp_path: Path, db: None) -> None:
    from runs.persistence.artifacts import ArtifactStorage
    from runs.persistence.outbox import DatabaseOutbox

    workspace = example_workspace(tmp_path / "kill-run")
    container = start_container("kill-run", workspace, runtime_engine.limits(TEST_LIMITS))
    executor = SandboxExecutor("kill-run", workspace, container, ArtifactStorage(), DatabaseOutbox(), ToolSettings(write_paths=WRITE_PATHS))
    kill_during_long_check(executor)
    with pytest.raises(NotFound):
        runtime_engine.client.containers.get(container.id)


def test_it_stops_the_run_at_once_when_the_engine_is_slow_to_remove_the_container(
    runtime_engine: RuntimeEngine, tmp_path: Path, db: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The kill switch must not wait on the engine: here removal stalls until the
    loop has returned (as a busy engine's can), and the loop stops all the same."""
    import sandbox.container.sandbox_container
    from runs.persistence.artifacts import ArtifactStorage
    from runs.persistence.outbox import DatabaseOutbox

    class StallingClient:
        class api:
            @staticmethod
            def remove_container(container_id: str, force: bool = False) -> None:
                returned.wait(600)

    workspace = example_workspace(tmp_path / "slow-engine")
    container = start_container("slow-engine", workspace, runtime_engine.limits(TEST_LIMITS))
    executor = SandboxExecutor(
        "slow-engine", workspace, container, ArtifactStorage(), DatabaseOutbox(), ToolSettings(write_paths=WRITE_PATHS)
    )
    monkeypatch.setattr(sandbox.container.sandbox_container, "new_client", lambda timeout: StallingClient())
    returned = threading.Event()
    try:
        kill_during_long_check(executor, returned)
    finally:
        returned.set()
        monkeypatch.undo()
        executor.close()
