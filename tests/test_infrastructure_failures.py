"""The line between a check that said no and a sandbox that failed (issue 20), in its
parts: the core retries a transient receipt that names an infrastructure failure like
any transient failure, never takes it as evidence, tells the model what happened, and
stops ``sandbox_unavailable`` when the retries run out; the executor's reading of the
engine client's errors; cleanup that tolerates the engine's own doings; commands that
name a failure in one line. The real engine failing is in tests/test_engine_chaos.py."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import requests
from docker.errors import APIError, DockerException, ImageNotFound, NotFound

from adapters.feedback import render_feedback
from core import events as ev
from core import feedback as fb
from core.faults import INJECTED_INFRASTRUCTURE, Fault
from core.jsonutil import JSON
from core.ports import Call
from core.receipts import Receipt, Status
from core.scenarios import FIXED, build_rig, call
from runs.cli import EXIT_ERROR
from sandbox.container.engine import unavailable
from sandbox.container.spec import remove_container

ROOT = Path(__file__).resolve().parent.parent
FIX_AND_CHECK = [
    call("write_file", path="src/calc.py", content=FIXED),
    call("run_check", check_id="tests"),
    call("finish", summary="fixed"),
]


def _receipt(status: Status, data: dict[str, JSON]) -> Receipt:
    return Receipt(call_id="c1", tool="run_check", status=status, effect="none", revision="r", data=data)


def test_it_reads_the_infrastructure_reason_only_from_a_transient_receipt() -> None:
    assert _receipt("transient", {"infrastructure": "engine gone"}).infrastructure == "engine gone"
    assert _receipt("ok", {"infrastructure": "engine gone"}).infrastructure is None
    assert _receipt("transient", {"error": "disk full"}).infrastructure is None
    assert _receipt("transient", {"infrastructure": ""}).infrastructure is None
    assert _receipt("transient", {"infrastructure": 7}).infrastructure is None


def test_it_retries_an_infrastructure_failure_and_tells_the_model_what_happened() -> None:
    rig = build_rig(FIX_AND_CHECK, faults=[Fault("run_check", "infrastructure", 2)])
    rig.harness.run()
    assert rig.state.outcome == "complete"
    retries = [e for e in rig.store.events if isinstance(e, ev.Retry)]
    assert [r.attempt for r in retries] == [1, 2]
    assert all(INJECTED_INFRASTRUCTURE in r.reason and "the sandbox failed, not the call" in r.reason for r in retries)
    assert rig.clock.slept == [0.5, 1.0]
    # One piece of evidence, from the attempt that ran; the failed attempts left none.
    assert [(e.passed, e.call_id) for e in rig.state.evidence] == [(True, "c2")]
    result = rig.feedbacks[2]
    assert isinstance(result, fb.Result) and result.earlier_attempts == [INJECTED_INFRASTRUCTURE] * 2
    text, failed = render_feedback(result, None, 10_000)
    assert not failed and "2 failed attempt(s) that proved nothing" in text and INJECTED_INFRASTRUCTURE in text


def test_it_stops_sandbox_unavailable_when_the_attempts_run_out_on_infrastructure() -> None:
    rig = build_rig(FIX_AND_CHECK, faults=[Fault("run_check", "infrastructure", 9)])
    rig.harness.run()
    assert rig.state.outcome == "sandbox_unavailable"
    assert INJECTED_INFRASTRUCTURE in rig.state.stop_message and "failed transiently 3 times" in rig.state.stop_message
    assert rig.state.evidence == [] and rig.state.calls == 1 + 3  # the write, then three attempts of the check
    types = rig.event_types()
    assert "evidence_recorded" not in types and "receipt_invalid" not in rig.state.stop_message
    assert types[-1] == "stopped"


def test_it_stops_sandbox_unavailable_when_the_deadline_ends_the_retries() -> None:
    rig = build_rig(FIX_AND_CHECK, faults=[Fault("run_check", "infrastructure", 9)])

    original = rig.harness.context.executor.execute

    def slow(call_: Call) -> object:  # each check attempt waits for the engine for 40% of the run's time
        if call_.tool == "run_check":
            rig.clock.t += rig.state.limits.wall_time_seconds * 0.4
        return original(call_)

    rig.harness.context.executor.execute = slow  # type: ignore[method-assign, assignment]  # this instance's only; mypy keeps a protocol method's self
    rig.harness.run()
    assert rig.state.outcome == "sandbox_unavailable" and "wall-time limit" in rig.state.stop_message
    assert rig.state.evidence == [] and rig.state.calls == 1 + 3  # the third attempt ends past the deadline


def test_it_keeps_the_ordinary_outcomes_for_transient_failures_of_the_call_itself() -> None:
    rig = build_rig(FIX_AND_CHECK, faults=[Fault("run_check", "transient", 9)])
    rig.harness.run()
    assert rig.state.outcome == "attempt_limit"
    rig = build_rig(FIX_AND_CHECK, faults=[Fault("run_check", "transient", 1)])
    rig.harness.run()
    assert isinstance(rig.feedbacks[2], fb.Result)
    assert rig.state.outcome == "complete" and rig.feedbacks[2].earlier_attempts == ["transient failure"]


def test_it_still_stops_killed_when_the_kill_switch_meets_a_failing_sandbox() -> None:
    rig = build_rig(FIX_AND_CHECK, faults=[Fault("run_check", "infrastructure", 9)])

    class Killed:
        def kill_requested(self) -> bool:
            return rig.state.calls >= 2

    rig.harness.context.controls = Killed()
    rig.harness.run()
    assert rig.state.outcome == "killed"


# -- the commands name the cause in one line ----------------------------------------


def _command(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env={**os.environ, "DJANGO_SETTINGS_MODULE": "harness_site.settings", **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.slow  # waits out a connection timeout in a subprocess
def test_it_names_an_unreachable_database_in_one_line_with_exit_code_three(tmp_path: Path) -> None:
    # Nothing listens on port 1: every query fails as a real outage would.
    down = {"DATABASE_URL": "postgres://postgres@127.0.0.1:1/harness", "HARNESS_VAR_DIR": str(tmp_path)}
    demo = ROOT / "examples" / "demo"
    created = _command("run_task", str(demo / "contract.json"), "--script", str(demo / "proposals.json"), **down)
    resumed = _command("resume_run", "2b1c7f4e-0d7a-4a51-9a43-2f6f0a0b8c11", **down)
    for done, what in ((created, "the run could not be created"), (resumed, "the run could not be looked up")):
        assert done.returncode == EXIT_ERROR, done.stderr
        assert "Traceback" not in done.stderr and done.stdout == ""
        [line] = done.stderr.strip().splitlines()
        assert line.startswith(what) and "OperationalError" in line and "127.0.0.1" in line


# -- what the engine client's errors mean -------------------------------------------


def _api_error(cls: type[APIError], status: int, explanation: str) -> APIError:
    response = requests.Response()
    response.status_code = status
    return cls(f"{status} error", response=response, explanation=explanation)


def test_it_names_each_engine_failure_and_waits_only_for_an_engine_that_does_not_answer() -> None:
    cases = [
        (requests.ConnectionError("refused"), True, "did not answer (ConnectionError)"),
        (DockerException("Error while fetching server API version"), True, "did not answer (DockerException)"),
        (_api_error(APIError, 500, "daemon is shutting down"), True, "answered 500 (daemon is shutting down)"),
        (_api_error(NotFound, 404, "No such container"), False, "the sandbox container no longer exists"),
        (_api_error(ImageNotFound, 404, "No such image: sandbox"), False, "the sandbox image is missing"),
        (_api_error(APIError, 409, "container is not running"), False, "answered 409"),
    ]
    for exc, down, words in cases:
        problem = unavailable(exc, "starting the check")
        assert problem.engine_down is down and problem.reason.startswith("starting the check: ") and words in problem.reason


class _Engine:
    """The engine's answer to a removal, as the docker client raises it."""

    def __init__(self, answer: APIError | None) -> None:
        self.api = self
        self.answer = answer

    def remove_container(self, container_id: str, force: bool) -> None:
        if self.answer is not None:
            raise self.answer


def test_it_tolerates_a_removal_in_progress_or_a_container_already_gone() -> None:
    assert remove_container(_Engine(None), "c") is True
    assert remove_container(_Engine(_api_error(APIError, 409, "removal of container c is already in progress")), "c") is True
    assert remove_container(_Engine(_api_error(NotFound, 404, "No such container: c")), "c") is False
    with pytest.raises(APIError):
        remove_container(_Engine(_api_error(APIError, 500, "boom")), "c")
