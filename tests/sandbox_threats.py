"""What the sandbox threat tests share (tests/test_sandbox_isolation.py, _limits, _kill,
_disk and _bypasses). Threats against the sandbox, each driven through the real Harness
with the real executor, Docker engine and image. Each attack is a check (trusted policy
naming an untrusted command) or a file tool call; the test asserts what the harness
recorded, and that the run then goes on to finish normally."""

from __future__ import annotations

from core.policy import CheckDef
from tests.fixtures_sandbox import Outcome


def check(check_id: str, *command: str, timeout: int = 30) -> CheckDef:
    return CheckDef(check_id=check_id, command=list(command), timeout_seconds=timeout)


def assert_survived(outcome: Outcome) -> None:
    assert outcome.state.outcome == "complete", outcome.summary()
    assert outcome.receipt("run_check", "smoke")["data"]["exit_code"] == 0
