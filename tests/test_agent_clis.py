"""The three agent CLIs (sandbox/agent/clis, pinned), run for real and headless on this host by
their presets (sandbox/agent/presets.py) against a scripted model server speaking their
provider's API (tests/agents_support/model_servers.py) and a real MCP server made with
the official SDK that checks the run's bearer token (tests/agents_support/mcp_server.py).

For each CLI: the model's tool call reaches the MCP server with exactly its arguments and
the tool's result reaches the model's next request; the CLI's own shell and write tools,
called by the model, do nothing and the model is told so; a wrong token is refused by the
MCP server and no tool is called. Every run is traced with strace where it is installed:
the CLI connects to nothing but 127.0.0.1.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

from sandbox.agent.presets import CONNECTED, ModelProxy, Preset, RunEndpoints, launch, mcp_report, parse_version, version_argv
from tests.agents_support.mcp_server import FILE_TEXT, PATCH_RESULT, WorkspaceMcp, workspace_mcp
from tests.agents_support.model_servers import ModelServer, Recorded, Text, ToolCall, Turn, model_server

pytestmark = [pytest.mark.slow, pytest.mark.agent_cli]

ROOT = Path(__file__).resolve().parent.parent
BIN = ROOT / "sandbox" / "agent" / "clis" / "node_modules" / ".bin"
TOKEN = "run-token-3f9b1c7e"
PATCH = "--- a/src/app.py\n+++ b/src/app.py\n@@ -1,2 +1,2 @@\n def answer():\n-    return 41\n+    return 42\n"
TIMEOUT_S = 120


@dataclass(frozen=True)
class Cli:
    preset: Preset
    model: str
    version: str
    read_file: str  # the harness tool's name as the CLI offers it to the model
    apply_patch: str
    builtin_calls: tuple[ToolCall, ...]  # the CLI's own shell and write tools, as a model would call them
    token_header: tuple[str, str]  # how the model request carries the run token

    @property
    def executable(self) -> str:
        return str(BIN / {"claude-code": "claude", "codex": "codex", "gemini-cli": "gemini"}[self.preset])


CLIS = [
    Cli(
        "claude-code",
        "claude-sonnet-4-5",
        "2.1.197",
        "mcp__harness__read_file",
        "mcp__harness__apply_patch",
        (
            ToolCall("Bash", {"command": "touch probe", "description": "make the probe"}),
            ToolCall("Write", {"file_path": "probe", "content": "x"}),
        ),
        ("x-api-key", TOKEN),
    ),
    Cli(
        "codex",
        "gpt-5.1-codex",
        "0.171.0",
        "mcp__harness__read_file",
        "mcp__harness__apply_patch",
        (
            ToolCall("exec_command", {"cmd": "touch probe"}),
            ToolCall("shell", {"command": ["touch", "probe"]}),
            ToolCall("apply_patch", {"input": "*** Begin Patch\n*** Add File: probe\n+x\n*** End Patch\n"}),
        ),
        ("authorization", f"Bearer {TOKEN}"),
    ),
    Cli(
        "gemini-cli",
        "gemini-2.5-pro",
        "0.61.0",
        "mcp_harness_read_file",
        "mcp_harness_apply_patch",
        (
            ToolCall("run_shell_command", {"command": "touch probe"}),
            ToolCall("write_file", {"file_path": "probe", "content": "x"}),
        ),
        ("x-goog-api-key", TOKEN),
    ),
]

# Codex offers these of its own whatever its configuration: the MCP resource tools read
# only from the configured servers (here the harness endpoint alone) and request_user_input
# answers only in Plan mode; nothing else of the CLI is left.
CODEX_LEFTOVERS = {"list_mcp_resources", "list_mcp_resource_templates", "read_mcp_resource", "request_user_input"}


@pytest.fixture(scope="module", autouse=True)
def _installed() -> None:
    if not BIN.is_dir():
        raise RuntimeError("sandbox/agent/clis has no node_modules: run `make setup` (it runs npm ci there)")


@dataclass
class Finished:
    returncode: int
    stdout: str
    stderr: str
    seconds: float
    connects: list[tuple[str, int]]  # (address, port) of every AF_INET/AF_INET6 connect, None without strace


_CONNECT = re.compile(
    r"connect\(\d+, \{sa_family=AF_INET6?, sin6?_port=htons\((\d+)\), (?:sin_addr=inet_addr\(\"([^\"]+)\"\)|.*?inet_pton\(AF_INET6, \"([^\"]+)\")"
)


def _run(cli: Cli, home: Path, workdir: Path, server: ModelServer, mcp: WorkspaceMcp, token: str, prompt: str) -> Finished:
    proxy = ModelProxy(anthropic=server.base_url, openai=f"{server.base_url}/v1", gemini=server.base_url)
    run = RunEndpoints(mcp_url=mcp.url, token=token, proxy=proxy, model=cli.model, home=str(home), workdir=str(workdir))
    how = launch(cli.preset, run, prompt, executable=cli.executable)
    for relative, content in how.files.items():
        path = home / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content)
    env = {**how.env, "PATH": f"{Path(shutil.which('node') or '/usr/bin/node').parent}:{how.env['PATH']}"}
    trace = home.parent / f"{home.name}.strace"
    argv: Sequence[str] = how.argv
    if shutil.which("strace"):
        argv = ["strace", "-f", "-qq", "-e", "trace=connect", "-o", str(trace), *argv]
    started = time.monotonic()
    process = subprocess.Popen(
        argv,
        cwd=workdir,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        stdout, stderr = process.communicate(timeout=TIMEOUT_S)
    finally:
        # The CLI's whole process group, whatever it left behind (MCP helpers, shells).
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(10)
    connects = []
    if trace.exists():
        for line in trace.read_text().splitlines():
            found = _CONNECT.search(line)
            if found:
                connects.append((found.group(2) or found.group(3), int(found.group(1))))
    return Finished(process.returncode, stdout, stderr, time.monotonic() - started, connects)


@dataclass
class Rig:
    server: ModelServer
    mcp: WorkspaceMcp
    home: Path
    workdir: Path


@pytest.fixture
def rig_for(tmp_path: Path) -> Iterator[Callable[..., Rig]]:
    """``rig(script, token=...)``: a model server with the script and an MCP server, both
    stopped when the test ends."""
    with contextlib.ExitStack() as stack:

        def make(script: Sequence[Turn], mcp_token: str = TOKEN) -> Rig:
            server = stack.enter_context(model_server(script))
            mcp = stack.enter_context(workspace_mcp(tmp_path / "mcp", mcp_token))
            home = tmp_path / "home"
            workdir = tmp_path / "work"
            home.mkdir()
            (workdir / "src").mkdir(parents=True)
            (workdir / "src" / "app.py").write_text("def answer():\n    return 41\n")
            return Rig(server, mcp, home, workdir)

        yield make


def _only_loopback(finished: Finished) -> None:
    elsewhere = [c for c in finished.connects if c[0] not in ("127.0.0.1", "::1", "::ffff:127.0.0.1")]
    assert not elsewhere, f"the CLI tried to reach {elsewhere}"


def _harness_tools(cli: Cli, request: Recorded) -> set[str]:
    return {name for name in request.tool_names() if name in (cli.read_file, cli.apply_patch)}


def _diagnose(finished: Finished, server: ModelServer) -> str:
    paths = [(r.method, r.path, r.turn) for r in server.requests]
    return f"exit {finished.returncode}\nstdout: {finished.stdout[-3000:]}\nstderr: {finished.stderr[-3000:]}\nmodel requests: {paths}"


@pytest.mark.parametrize("cli", CLIS, ids=[c.preset for c in CLIS])
def test_it_version_is_the_pinned_one(cli: Cli) -> None:
    out = subprocess.run(
        version_argv(cli.preset, executable=cli.executable), capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL
    )
    assert out.returncode == 0, out.stderr
    assert parse_version(out.stdout) == cli.version
    lock = json.loads((ROOT / "sandbox" / "agent" / "clis" / "package-lock.json").read_text())
    package = {"claude-code": "@anthropic-ai/claude-code", "codex": "@openai/codex", "gemini-cli": "@google/gemini-cli"}[cli.preset]
    assert lock["packages"][f"node_modules/{package}"]["version"] == cli.version


@pytest.mark.parametrize("cli", CLIS, ids=[c.preset for c in CLIS])
def test_it_calls_reach_the_mcp_server_and_results_the_model(cli: Cli, rig_for: Callable[..., Rig]) -> None:
    final = f"FINAL-{cli.preset}-d41c"
    script: list[Turn] = [ToolCall(cli.read_file, {"path": "src/app.py"}), ToolCall(cli.apply_patch, {"patch": PATCH}), Text(final)]
    rig = rig_for(script)
    finished = _run(cli, rig.home, rig.workdir, rig.server, rig.mcp, TOKEN, "Read src/app.py and make answer() return 42.")
    why = _diagnose(finished, rig.server)

    assert finished.returncode == 0, why
    assert rig.mcp.calls() == [{"tool": "read_file", "args": {"path": "src/app.py"}}, {"tool": "apply_patch", "args": {"patch": PATCH}}], (
        why
    )
    assert rig.mcp.refused() == []
    turns = rig.server.turn_requests()
    assert len(turns) == 3, why
    # Each tool's result is in the next request, in the provider's shape.
    assert "marker-7c1f" in turns[1].text() and "marker-a93e" not in turns[1].text()
    assert "marker-a93e" in turns[2].text()
    assert final in finished.stdout
    # The model is offered the harness tools and, but for Codex's leftovers, nothing else.
    for request in turns:
        offered = set(request.tool_names())
        assert _harness_tools(cli, request) == {cli.read_file, cli.apply_patch}, offered
        extra = offered - {cli.read_file, cli.apply_patch}
        assert extra <= (CODEX_LEFTOVERS if cli.preset == "codex" else set()), extra
        name, value = cli.token_header
        assert request.headers.get(name) == value
    # The transcript on stdout is JSON, one event a line.
    events = [json.loads(line) for line in finished.stdout.splitlines() if line.strip()]
    assert events
    # What the launcher reads of it (runs.agents.launch): Claude Code reports the server connected.
    reports = [mcp_report(cli.preset, line.encode()) for line in finished.stdout.splitlines()]
    assert [r for r in reports if r is not None] == ([CONNECTED] if cli.preset == "claude-code" else []), reports
    assert rig.server.unanswered() == [r for r in rig.server.unanswered() if r.method == "HEAD"]
    _only_loopback(finished)
    assert FILE_TEXT and PATCH_RESULT  # what the markers stand in


@pytest.mark.parametrize("cli", CLIS, ids=[c.preset for c in CLIS])
def test_it_builtin_shell_and_write_tools_do_nothing(cli: Cli, rig_for: Callable[..., Rig]) -> None:
    final = f"FINAL-{cli.preset}-77b0"
    rig = rig_for([*cli.builtin_calls, Text(final)])
    finished = _run(cli, rig.home, rig.workdir, rig.server, rig.mcp, TOKEN, "Create a file named probe.")
    why = _diagnose(finished, rig.server)

    assert finished.returncode == 0, why
    made = [p for p in (*rig.workdir.rglob("probe*"), *rig.home.rglob("probe*"))]
    assert made == [], made
    assert rig.mcp.calls() == []
    turns = rig.server.turn_requests()
    assert len(turns) == len(cli.builtin_calls) + 1, why
    # Each refused call's result reached the model's next request and says the tool is not there.
    for call, after in zip(cli.builtin_calls, turns[1:], strict=True):
        assert _refusal(cli, call.name, after), after.text()[-2000:]
    assert final in finished.stdout
    _only_loopback(finished)


def _refusal(cli: Cli, tool: str, request: Recorded) -> bool:
    text = request.text()
    if cli.preset == "claude-code":
        return f"No such tool available: {tool}" in text
    if cli.preset == "codex":
        return f"unsupported call: {tool}" in text
    return f'Tool \\"{tool}\\" not found' in text


@pytest.mark.parametrize("cli", CLIS, ids=[c.preset for c in CLIS])
def test_it_wrong_token_is_refused_and_nothing_is_called(cli: Cli, rig_for: Callable[..., Rig]) -> None:
    rig = rig_for([ToolCall(cli.read_file, {"path": "src/app.py"}), Text("FINAL")], mcp_token=TOKEN)
    finished = _run(cli, rig.home, rig.workdir, rig.server, rig.mcp, "run-token-of-another-run", "Read src/app.py.")
    why = _diagnose(finished, rig.server)

    assert rig.mcp.calls() == [], why
    refused = rig.mcp.refused()
    assert refused, why
    assert {r["authorization"] for r in refused} <= {"Bearer run-token-of-another-run", None}, refused
    # No model request offered a harness tool: the CLI never listed them.
    assert all(not _harness_tools(cli, r) for r in rig.server.requests), why
    # Claude Code says so in its transcript, Codex on standard error, which the launcher
    # reads (runs.agents.launch).
    said = [*finished.stdout.splitlines(), *finished.stderr.splitlines()]
    reports = [r for r in (mcp_report(cli.preset, line.encode()) for line in said) if r is not None]
    if cli.preset != "gemini-cli":
        assert reports and CONNECTED not in reports, (reports, why)
    _only_loopback(finished)
