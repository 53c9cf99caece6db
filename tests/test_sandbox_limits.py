"""Threats against the sandbox's limits (tests/sandbox_threats.py): a fork bomb, a
memory bomb, 100 MB of output and a check that sleeps past its timeout."""

from __future__ import annotations

import hashlib

import pytest

from runs.persistence.artifacts import ArtifactStorage
from sandbox.container.quota import MB
from sandbox.executor import SandboxExecutor
from tests.fixtures_sandbox import (
    SURVIVE,
    ModuleSandbox,
    drive,
    sandbox_policy,
    step,
)
from tests.sandbox_threats import assert_survived, check

pytestmark = [pytest.mark.docker]


def leftover_processes(module_sandbox: ModuleSandbox) -> list[list[str]]:
    processes: list[list[str]] = module_sandbox.engine.client.containers.get(module_sandbox.container.id).top()["Processes"]
    return processes


FORK_BOMB = check(
    "fork_bomb",
    "python3",
    "-c",
    "import os\n"
    "failed = 0\n"
    "while True:\n"
    "    try:\n"
    "        os.fork()\n"
    "    except OSError as exc:\n"
    "        failed += 1\n"
    "        if failed == 1:\n"
    "            print('fork refused:', exc, flush=True)\n",
    timeout=4,
)


def test_it_stops_a_fork_bomb_with_the_pids_limit(sandbox: SandboxExecutor, module_sandbox: ModuleSandbox) -> None:
    outcome = drive(sandbox, sandbox_policy(FORK_BOMB), [step("run_check", check_id="fork_bomb"), *SURVIVE])
    receipt = outcome.receipt("run_check", "fork_bomb")
    data = receipt["data"]
    assert receipt["status"] == "ok"
    assert "Resource temporarily unavailable" in data["output"]
    # The bomb never ends by itself: that the check returned is the limits' doing.
    # How fast the kill lands depends on the machine's load and is not asserted.
    if module_sandbox.engine.runtime == "runsc" and data["oom_killed"]:
        # Under gVisor every sandboxed process's memory is its kernel's, so the memory
        # limit may end the bomb before the time limit does, by killing that kernel.
        assert data["timed_out"] is False, data
    else:
        assert data["timed_out"] is True and data["exit_code"] is None, data
        assert data["duration_ms"] >= FORK_BOMB.timeout_seconds * 1000, data  # not cut before its time
    evidence = outcome.of_type("evidence_recorded")[0]
    assert evidence.check_id == "fork_bomb" and evidence.passed is False
    assert len(leftover_processes(module_sandbox)) == 1  # only the reaper, PID 1
    assert_survived(outcome)


MEMORY_BOMB = check("memory_bomb", "python3", "-c", "hoard = []\nwhile True:\n    hoard.append(b'x' * 10_000_000)\n")


MEMORY_BOMB_UNDER_GVISOR = check("memory_bomb", *MEMORY_BOMB.command, timeout=5)


def test_it_kills_a_memory_bomb_and_reports_it(sandbox: SandboxExecutor, module_sandbox: ModuleSandbox) -> None:
    runc = module_sandbox.engine.runtime == "runc"
    bomb = MEMORY_BOMB if runc else MEMORY_BOMB_UNDER_GVISOR
    outcome = drive(sandbox, sandbox_policy(bomb), [step("run_check", check_id="memory_bomb"), *SURVIVE])
    data = outcome.receipt("run_check", "memory_bomb")["data"]
    if runc:
        assert data["exit_code"] == 137
        assert data["oom_killed"] is True
        assert data["timed_out"] is False
    else:
        # gVisor's kernel is what the host OOM-kills: the sandbox dies whole, its
        # stream is cut at the deadline, and the container is restarted.
        assert data["timed_out"] is True and data["exit_code"] is None
    assert outcome.of_type("evidence_recorded")[0].passed is False
    assert_survived(outcome)


FLOOD = check("flood", "sh", "-c", "yes 0123456789abcdef | head -c 100000000")


def test_it_caps_a_100mb_output_and_stores_its_start_and_end(sandbox: SandboxExecutor) -> None:
    outcome = drive(sandbox, sandbox_policy(FLOOD), [step("run_check", check_id="flood"), *SURVIVE])
    receipt = outcome.receipt("run_check", "flood")
    data = receipt["data"]
    assert data["exit_code"] == 0 and data["truncated"] is True and data["output_bytes"] == 100_000_000
    assert len(data["output"].encode()) < 51_000  # half of max_output_bytes_per_call, plus the marker
    assert data["output"].startswith("0123456789abcdef\n") and "bytes omitted; stored output (cut): sha256:" in data["output"]
    assert receipt["artifacts"] == [data["output_ref"]]
    # Stored: the first bytes, a notice of the cut and the last bytes, within the
    # per-check cap (sandbox.container.quota.DiskQuota.output_max_bytes), never all 100 MB.
    assert data["output_cut"] is True and data["output_stored_bytes"] < 8 * MB
    stored = ArtifactStorage().get(data["output_ref"])
    assert len(stored) <= 8 * MB and stored.startswith(b"0123456789abcdef\n")
    assert f"[harness: output cut: the first {data['output_stored_bytes']} of 100000000 bytes".encode() in stored
    line = b"0123456789abcdef\n"
    last = bytes(line[i % len(line)] for i in range(100_000_000 - 1000, 100_000_000))
    assert stored.endswith(last) and "sha256:" + hashlib.sha256(stored).hexdigest() == data["output_ref"]
    feedback_seen = outcome.of_type("evidence_recorded")[0]
    assert feedback_seen.passed is True  # a loud check can still pass; its output is just capped
    assert_survived(outcome)


SLEEPER = check("sleeper", "sh", "-c", "setsid sleep 300 & echo started; sleep 300", timeout=2)


def test_it_kills_a_check_that_sleeps_past_its_timeout(sandbox: SandboxExecutor, module_sandbox: ModuleSandbox) -> None:
    outcome = drive(sandbox, sandbox_policy(SLEEPER), [step("run_check", check_id="sleeper"), *SURVIVE])
    receipt = outcome.receipt("run_check", "sleeper")
    data = receipt["data"]
    assert receipt["status"] == "ok" and receipt["effect"] == "none"
    assert data["timed_out"] is True and data["exit_code"] is None and data["timeout_seconds"] == 2
    # Not before its timeout, and well before its own end (sleep 300): at any load.
    assert 2000 <= data["duration_ms"] < 300_000
    assert data["output"].startswith("started")
    evidence = outcome.state.evidence[0]
    assert evidence.check_id == "sleeper" and evidence.timed_out is True and evidence.passed is False
    assert len(leftover_processes(module_sandbox)) == 1  # the setsid'd sleep is gone too
    assert_survived(outcome)
