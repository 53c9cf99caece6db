"""The programs every sandbox container runs are files of the image
(sandbox/image/harness, copied to /opt/harness by build.sh and the Dockerfile), no
longer strings in the worker's code: PID 1's reaper, the wrapper every check runs
under and the egress relay (tests/test_sandbox_egress.py runs it against the proxy). Read here in a container of the image as built, under each runtime."""

from __future__ import annotations

import runpy
import subprocess
from pathlib import Path

import docker
import pytest
from django.conf import settings

from sandbox.container.exec_watch import ExecResult
from sandbox.container.output import OutputCapture
from sandbox.container.spec import CHECK_WRAPPER, PROGRAMS, REAPER, SCRATCH, WORKDIR
from sandbox.egress import protocol
from tests.fixtures_sandbox import ModuleSandbox

SOURCE = Path(__file__).resolve().parent.parent / "sandbox" / "image" / "harness"


def run(module_sandbox: ModuleSandbox, argv: list[str], *, timeout: int = 20, on_copy: bool = False) -> tuple[ExecResult, bytes]:
    module_sandbox.container.kill_processes()
    capture = OutputCapture(10_000)
    result = module_sandbox.container.exec(argv, timeout_seconds=timeout, capture=capture, on_copy=on_copy)
    output = bytes(capture.head)
    capture.discard()
    return result, output


@pytest.mark.docker
def test_it_runs_the_image_s_copy_of_each_program(docker_engine: docker.DockerClient) -> None:
    for program in ("reaper.py", "relay.py", "check.sh"):
        shipped = docker_engine.containers.run(settings.SANDBOX_IMAGE, ["cat", f"{PROGRAMS}/{program}"], remove=True, network_mode="none")
        assert shipped == (SOURCE / program).read_bytes(), f"{settings.SANDBOX_IMAGE} was not built from this checkout's {program}"


def test_it_keeps_the_programs_and_the_worker_to_the_same_values() -> None:
    # The programs run with nothing but the image's standard library: they keep their
    # own copies of what the worker's code names, which must agree.
    relay = runpy.run_path(str(SOURCE / "relay.py"), run_name="relay")
    assert relay["FRAME"].format == protocol.FRAME.format
    kinds = ("READY", "OPEN", "DATA", "CLOSE", "DNS")
    assert [relay[kind] for kind in kinds] == [getattr(protocol, kind) for kind in kinds]
    assert f"{PROGRAMS}/relay.py" == protocol.RELAY and f"{PROGRAMS}/check.sh" == CHECK_WRAPPER
    wrapper = (SOURCE / "check.sh").read_text()
    assert f"SCRATCH={SCRATCH}\n" in wrapper and f"WORKDIR={WORKDIR}\n" in wrapper


def test_it_lints_the_wrapper_as_a_posix_shell_script() -> None:
    # sh -n parses without running: a syntax error fails here, not in every check.
    done = subprocess.run(["sh", "-n", str(SOURCE / "check.sh")], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr


@pytest.mark.docker
def test_it_reaps_an_orphan_as_pid_1(module_sandbox: ModuleSandbox) -> None:
    # The orphan's parent exits at once and the wrapper kills the orphan: only PID 1
    # can collect it. The look waits (at most 10 s) for a zombie to go.
    result, _ = run(module_sandbox, ["sh", "-c", "sleep 300 & exit 0"])
    assert result.exit_code == 0
    look = "for _ in $(seq 100); do ps -o stat= -e | grep -q '^Z' || break; sleep 0.1; done; ps -o pid=,stat=,args= -e"
    result, output = run(module_sandbox, ["sh", "-c", look])
    lines = output.decode().splitlines()
    assert any(line.split()[0] == "1" and REAPER in line for line in lines), lines
    assert not [line for line in lines if line.split()[1].startswith("Z")], lines


@pytest.mark.docker
def test_it_gives_the_check_s_own_exit_status(module_sandbox: ModuleSandbox) -> None:
    result, output = run(module_sandbox, ["sh", "-c", "echo said; exit 7"])
    assert (result.exit_code, output, result.timed_out) == (7, b"said\n", False)


@pytest.mark.docker
def test_it_kills_a_check_at_its_timeout(module_sandbox: ModuleSandbox) -> None:
    result, _ = run(module_sandbox, ["sleep", "30"], timeout=1)
    assert result.timed_out is True


@pytest.mark.docker
def test_it_empties_scratch_and_kills_what_a_check_left_running(module_sandbox: ModuleSandbox) -> None:
    run(module_sandbox, ["sh", "-c", f"echo left > {SCRATCH}/left; nohup sleep 300 >/dev/null 2>&1 &"])
    result, output = run(module_sandbox, ["sh", "-c", f"ls -A {SCRATCH}; ps -o args= -e"])
    assert result.exit_code == 0
    assert b"left" not in output and b"sleep 300" not in output, output


@pytest.mark.docker
def test_it_runs_a_check_in_a_throwaway_copy_of_the_workspace(module_sandbox: ModuleSandbox) -> None:
    result, output = run(module_sandbox, ["sh", "-c", "pwd; echo new > written.txt && cat written.txt"], on_copy=True)
    assert (result.exit_code, output) == (0, f"{SCRATCH}/tree\nnew\n".encode())
    result, output = run(
        module_sandbox, ["sh", "-c", f"for p in {WORKDIR}/written.txt {SCRATCH}/tree; do [ -e $p ] && echo $p; done; exit 0"]
    )
    assert (result.exit_code, output) == (0, b"")
