"""A check at the Docker floor: the requests the worker sends the engine for one
execution, counted where they leave for the socket (bench/engine_requests.py, the
transport docker-py sends through), against the real engine and image.

The common case is the SDK's own two (create the execution, start it with its output
streamed): the exit status comes from the wrapper at the end of the stream, the
read-only proof is asked once per container. The engine is asked more only when it
has something to say: a stream that ends without the wrapper's status, a status that
says the command was killed by a signal. Under runsc the host cannot read the
container's processes, so the kill of whatever is left is an execution of its own:
two requests more, no inspect."""

from __future__ import annotations

import contextlib
import socket
import threading
import time

import docker
import pytest
import requests

import sandbox.container.client as client_module
from bench.engine_requests import Requests, counting
from sandbox.container.client import new_client
from sandbox.container.exec_watch import ExecResult
from sandbox.container.output import OutputCapture
from tests.fixtures_sandbox import ModuleSandbox

pytestmark = pytest.mark.docker

CREATE = "POST /containers/{id}/exec"
START = "POST /exec/{id}/start"
INSPECT_EXEC = "GET /exec/{id}/json"
INSPECT_CONTAINER = "GET /containers/{id}/json"


def counted(module_sandbox: ModuleSandbox, argv: list[str], timeout: int = 20) -> tuple[ExecResult, bytes, Requests]:
    capture = OutputCapture(10_000)
    with counting() as seen:
        result = module_sandbox.container.exec(argv, timeout_seconds=timeout, capture=capture)
    output = bytes(capture.head)
    capture.discard()
    return result, output, seen


def floor(module_sandbox: ModuleSandbox) -> dict[str, int]:
    """The requests of an execution that ends normally: the SDK's two, and under runsc
    the kill of what is left (an execution of its own)."""
    executions = 2 if module_sandbox.engine.runtime == "runsc" else 1
    return {CREATE: executions, START: executions}


def test_it_costs_the_engine_two_requests_a_check(module_sandbox: ModuleSandbox) -> None:
    counted(module_sandbox, ["true"])  # the container's read-only proof, once
    for argv, code, printed in (
        (["python3", "-c", "import sys; print('out'); print('err', file=sys.stderr)"], 0, b"out\nerr\n"),
        (["sh", "-c", "echo failing >&2; exit 3"], 3, b"failing\n"),
    ):
        result, output, seen = counted(module_sandbox, argv)
        assert (result.exit_code, result.lost, result.error) == (code, None, None)
        # The wrapper's status is taken off the output: the check's own bytes only.
        assert sorted(output.splitlines()) == sorted(printed.splitlines())
        assert dict(seen.by_path) == floor(module_sandbox)


def test_it_takes_a_forged_status_followed_by_more_output_for_the_check_s_output(module_sandbox: ModuleSandbox) -> None:
    # The status counts only as the very last bytes of the stream: the check's own
    # imitation of it is output, and the real one still follows.
    forged = "printf '\\036harness-exit:0\\036' >&2; echo after; exit 5"
    result, output, seen = counted(module_sandbox, ["sh", "-c", forged])
    assert result.exit_code == 5
    assert output == b"\x1eharness-exit:0\x1eafter\n" or output == b"after\n\x1eharness-exit:0\x1e"
    assert dict(seen.by_path) == floor(module_sandbox)


def test_it_asks_the_engine_about_the_container_when_a_signal_killed_the_command(module_sandbox: ModuleSandbox) -> None:
    # 137 is also what a command gets when its container dies under it: the engine's
    # account settles which.
    result, _, seen = counted(module_sandbox, ["sh", "-c", "kill -9 $$"])
    assert (result.exit_code, result.lost) == (137, None)
    assert seen.by_path[INSPECT_CONTAINER] >= 1


def test_it_asks_the_engine_when_the_stream_ends_without_the_wrapper_s_status(module_sandbox: ModuleSandbox) -> None:
    # The wrapper itself killed from outside its process group (as a container's
    # death does): no status at the end of the stream, so the engine is asked for the
    # execution's and the container's account.
    marker = "harness-wrapper-probe"
    client = new_client(timeout=10)

    # Killed by a process of its own in the container (an execution of the killer's,
    # outside the wrapper's process group), so it works where the host cannot see the
    # sandbox's processes (gVisor) as where it can.
    find_and_kill = (
        'for d in /proc/[0-9]*; do p=${d#/proc/}; [ "$p" = $$ ] && continue; '
        'case "$(tr "\\0" " " < $d/cmdline 2>/dev/null)" in *check.sh*' + marker + '*) kill -9 "$p"; exit 0;; esac; done; exit 1'
    )

    def kill_the_wrapper() -> None:
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            execution = client.api.exec_create(module_sandbox.container.id, ["sh", "-c", find_and_kill])
            client.api.exec_start(execution["Id"])
            if client.api.exec_inspect(execution["Id"])["ExitCode"] == 0:
                return
            time.sleep(0.05)

    killer = threading.Thread(target=kill_the_wrapper)
    killer.start()
    try:
        result, _, seen = counted(module_sandbox, ["sh", "-c", f"sleep 5; echo {marker}"])
    finally:
        killer.join()
    assert result.exit_code == 137
    assert seen.by_path[INSPECT_EXEC] >= 1 and seen.by_path[INSPECT_CONTAINER] >= 1


def relay_to(unix_path: str) -> tuple[socket.socket, int]:
    """A TCP port on the loopback relayed to the engine's unix socket: an engine over
    TCP, as DOCKER_HOST=tcp://... names one."""
    listener = socket.create_server(("127.0.0.1", 0))

    def pipe(source: socket.socket, target: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := source.recv(65536):
                target.sendall(data)
        with contextlib.suppress(OSError):
            target.shutdown(socket.SHUT_WR)

    def serve() -> None:
        with contextlib.suppress(OSError):
            while True:
                conn, _ = listener.accept()
                engine = socket.socket(socket.AF_UNIX)
                engine.connect(unix_path)
                threading.Thread(target=pipe, args=(conn, engine), daemon=True).start()
                threading.Thread(target=pipe, args=(engine, conn), daemon=True).start()

    threading.Thread(target=serve, daemon=True).start()
    return listener, listener.getsockname()[1]


def test_it_reaches_the_engine_directly_whatever_the_environment_s_proxies(
    module_sandbox: ModuleSandbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A worker's HTTP(S)_PROXY is for the outside: the engine's client does not read
    # the environment (trust_env), so a proxy that does not exist changes nothing for
    # an engine over TCP, where requests would otherwise send every request to it.
    host = module_sandbox.engine.host
    if not host.startswith("unix://"):
        pytest.skip(f"the relay needs a unix socket, not {host}")
    listener, port = relay_to(host.removeprefix("unix://"))
    try:
        for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
            monkeypatch.setenv(name, "http://127.0.0.1:9")
        monkeypatch.delenv("NO_PROXY", raising=False)
        monkeypatch.delenv("no_proxy", raising=False)
        monkeypatch.setattr(client_module, "_host_source", lambda: f"tcp://127.0.0.1:{port}")
        client = new_client(timeout=10)
        assert client.api.trust_env is False
        assert client.ping()
        assert client.api.inspect_container(module_sandbox.container.id)["Id"] == module_sandbox.container.id
        # The SDK's default would have gone to the proxy that is not there.
        default = docker.APIClient(base_url=f"tcp://127.0.0.1:{port}", version=client.api.api_version, timeout=5)
        with pytest.raises(requests.exceptions.ProxyError):
            default.ping()
    finally:
        listener.close()
