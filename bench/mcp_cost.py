"""What Harness's gates add to one MCP tool call, measured in one run against the same
servers called directly with the official SDK:

- over streamable HTTP on loopback, the tracker the tests use
  (tests/mcp_servers/tracker.py), its read-only ``search_issues``;
- over stdio in a sandbox container of the image (sandbox/image/build.sh), its
  workspace search (``/opt/harness-mcp/bin/workspace-search``), ``find``.

For each, per call (medians):

- ``sdk_one_session``: the SDK's ``Client``, one session kept open for every call (the
  cheapest a client can be; HTTP only);
- ``sdk_session_per_call``: a new ``Client`` session for each call, as Harness opens
  one per call (for stdio: ``docker exec -i`` the server in the same container);
- ``harness_transport``: Harness's own conversation (sandbox/mcp_client.call_tool:
  byte cap, time bound, token handling, elicitation refused), without the gates;
- ``harness_gated``: whole runs driven in this process (runs.runtime.advance) with
  ``calls`` MCP calls against the same run without them, rounds interleaved: what one
  call costs through the policy, the argument schema, the events and receipts in the
  database and the executor, i.e. (median run with calls - median run without) / calls.

Both SDK paths use the ``legacy`` connect mode Harness uses, so the difference is
Harness's, not the protocol's. Uses its own SQLite database and container scope.

    python bench/mcp_cost.py [--rounds N] [--calls N] [--stdio-calls N] [--json]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from machine import load, machine, now  # noqa: E402

VAR = Path(tempfile.mkdtemp(prefix="bench-mcp-"))
SCOPE = f"bench-mcp-{uuid.uuid4().hex[:8]}"
os.environ.update(
    {
        "DEBUG": "1",
        "DJANGO_SETTINGS_MODULE": "harness_site.settings",
        "HARNESS_VAR_DIR": str(VAR),
        "DATABASE_URL": f"sqlite:///{VAR / 'harness.sqlite3'}",
        "HARNESS_SANDBOX_SCOPE": SCOPE,
    }
)

SEARCH = ["/opt/harness-mcp/bin/workspace-search"]
ENV_CHECK = {"check_id": "env", "command": ["env"], "version": "1", "timeout_seconds": 60}


def per_call(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    tail = ordered[math.ceil(0.9 * len(ordered)) - 1]
    return {"median_ms": round(statistics.median(ordered) * 1000, 2), "p90_ms": round(tail * 1000, 2), "n": len(ordered)}


def timed(call: Callable[[], object], n: int) -> list[float]:
    times = []
    for _ in range(n):
        began = time.perf_counter()
        call()
        times.append(time.perf_counter() - began)
    return times


def sdk_calls(connect: Callable[[], Any], tool: str, args: dict[str, Any], n: int, one_session: bool) -> list[float]:
    """``n`` calls with the SDK alone, in one session or a session each."""
    import anyio
    from mcp import Client

    async def call(client: Any) -> None:
        result = await client.call_tool(tool, args)
        if result.is_error:
            raise RuntimeError(f"{tool} failed: {result.content}")

    async def main() -> list[float]:
        times = []
        if one_session:
            async with Client(connect(), mode="legacy") as client:
                await call(client)  # warm
                for _ in range(n):
                    began = time.perf_counter()
                    await call(client)
                    times.append(time.perf_counter() - began)
            return times
        for _ in range(n):
            began = time.perf_counter()
            async with Client(connect(), mode="legacy") as client:
                await call(client)
            times.append(time.perf_counter() - began)
        return times

    found: list[float] = anyio.run(main)
    return found


def gated(operator: Any, step: dict[str, Any], calls: int, rounds: int) -> list[float]:
    """Per-call costs through the gates: each round a run with ``calls`` of ``step``
    and one without, each between the env check and finish."""
    from runs.runtime import advance, create_run
    from tests.runs_waiting import DEMO_CONTRACT

    def run(n: int) -> float:
        tools = sorted({"run_check", step["tool"]})
        limits = {**DEMO_CONTRACT["limits"], "max_proposals": n + 5, "max_tool_calls": n + 5}
        contract = {**DEMO_CONTRACT, "allowed_tools": tools, "verification_targets": ["env"], "limits": limits}
        script = [{"tool": "run_check", "args": {"check_id": "env"}}, *[step] * n, {"tool": "finish", "args": {"summary": "done"}}]
        began = time.perf_counter()
        made = create_run(contract, {"kind": "scripted", "script": script}, operator, enqueue=False)
        outcome = advance(str(made.pk))
        elapsed = time.perf_counter() - began
        if outcome != "complete":
            raise RuntimeError(f"the run with {n} calls of {step['tool']} ended {outcome}")
        return elapsed

    run(1)  # warm
    with_calls, without = [], []
    for _ in range(rounds):
        with_calls.append(run(calls))
        without.append(run(0))
    # Each round's pair, made back to back, differs by the calls alone.
    return [(a - b) / calls for a, b in zip(with_calls, without, strict=True)]


def summary(layers: dict[str, list[float]]) -> dict[str, Any]:
    out: dict[str, Any] = {name: per_call(samples) for name, samples in layers.items()}
    floor = out["sdk_session_per_call"]["median_ms"]
    gates = out["harness_gated"]["median_ms"]
    out["harness_gated / sdk_session_per_call"] = round(gates / floor, 2)
    out["added_ms_per_call_over_sdk_session_per_call"] = round(gates - floor, 1)
    out["added_ms_per_call_by_the_gates"] = round(gates - out["harness_transport"]["median_ms"], 1)
    if "sdk_one_session" in out:
        out["harness_gated / sdk_one_session"] = round(gates / out["sdk_one_session"]["median_ms"], 2)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=20, help="MCP calls per run and SDK samples, over HTTP")
    parser.add_argument("--stdio-calls", type=int, default=5, help="the same over stdio (each starts the server)")
    parser.add_argument("--image", default=os.environ.get("HARNESS_SANDBOX_IMAGE", "harness-sandbox:latest"))
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    os.environ["HARNESS_SANDBOX_IMAGE"] = args.image

    from tests.mcp_servers.running import TOKEN, TOKEN_ENV, tracker

    os.environ[TOKEN_ENV] = TOKEN
    try:
        with tracker(VAR / "tracker") as running:
            os.environ["HARNESS_MCP_ALLOWED_URLS"] = running.url
            results = measure(running.url, TOKEN, TOKEN_ENV, args)
    finally:
        shutil.rmtree(VAR, ignore_errors=True)
    out = {"benchmark": "mcp_cost", "date": now(), "machine": machine(), "load": load(), "results": results}
    if args.json:
        print(json.dumps(out, indent=2))
        return
    for transport, found in results.items():
        print(f"== {transport}")
        for key, value in found.items():
            print(f"  {key}: {json.dumps(value)}")


def measure(url: str, token: str, token_env: str, args: argparse.Namespace) -> dict[str, Any]:
    import django

    django.setup()
    import httpx2
    from django.conf import settings
    from django.contrib.auth.models import Group, User
    from django.core.management import call_command
    from mcp.client.stdio import StdioServerParameters
    from mcp.client.streamable_http import streamable_http_client

    from core.policy import SandboxLimits
    from projects.models import McpServer, default_project_id
    from sandbox.container.orphans import sweep_orphans
    from sandbox.container.sandbox_container import SandboxContainer
    from sandbox.container.spec import ContainerSpec
    from sandbox.mcp.client import call_tool
    from sandbox.mcp.config import McpServerConfig
    from tests.helpers import new_policy_version

    call_command("migrate", verbosity=0)
    operator = User.objects.create_user("bench-operator")
    operator.groups.add(Group.objects.get(name="operator"))
    project = default_project_id()
    McpServer.objects.create(project_id=project, name="tracker", url=url, credential_env=token_env, timeout_seconds=30)
    McpServer.objects.create(project_id=project, name="search", command=SEARCH, timeout_seconds=60)
    new_policy_version(
        rules=[
            {"name": "finishing", "tool": "finish", "decision": "allow"},
            {"name": "the env check", "tool": "run_check", "decision": "allow"},
            {"name": "searching", "tool": "tracker.search_issues", "decision": "allow"},
            {"name": "finding", "tool": "search.find", "decision": "allow"},
        ],
        read_only_tools=["tracker.search_issues", "search.find"],
        checks=[ENV_CHECK],
    )
    environ = {token_env: token}
    query = {"query": "totals"}
    text = {"text": "def order_total"}

    def http() -> Any:
        return streamable_http_client(url, http_client=httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}))

    tracker_config = McpServerConfig(name="tracker", url=url, credential_env=token_env)
    results: dict[str, Any] = {}
    one, each, transport, gates = [], [], [], []
    for _ in range(args.rounds):
        one += sdk_calls(http, "search_issues", query, args.calls, one_session=True)
        each += sdk_calls(http, "search_issues", query, args.calls, one_session=False)
        transport += timed(lambda: call_tool(tracker_config, environ, "search_issues", query), args.calls)
    gates = gated(operator, {"tool": "tracker.search_issues", "args": query}, args.calls, args.rounds)
    results["http (tracker.search_issues, loopback)"] = summary(
        {"sdk_one_session": one, "sdk_session_per_call": each, "harness_transport": transport, "harness_gated": gates}
    )

    # The workspace the runs search: the demo's.
    source = VAR / "source"
    shutil.copytree(ROOT / "examples/orders", source)
    container = SandboxContainer.start(
        f"bench-mcp-{uuid.uuid4().hex[:8]}", source, ContainerSpec.from_limits(SandboxLimits(), settings.SANDBOX_IMAGE), scope=SCOPE
    )
    try:
        search_config = McpServerConfig(name="search", command=tuple(SEARCH), timeout_seconds=60)

        def docker_exec() -> Any:
            # The SDK gives its child only HOME, PATH, SHELL, TERM and USER unless told:
            # the docker CLI would then miss DOCKER_HOST (an engine not on the default socket).
            return StdioServerParameters(command="docker", args=["exec", "-i", container.id, *SEARCH], env=dict(os.environ))

        each, transport = [], []
        for _ in range(args.rounds):
            each += sdk_calls(docker_exec, "find", text, args.stdio_calls, one_session=False)
            transport += timed(lambda: call_tool(search_config, {}, "find", text, container.attach), args.stdio_calls)
    finally:
        container.remove()
    gates = gated(operator, {"tool": "search.find", "args": text}, args.stdio_calls, args.rounds)
    # Nothing of the runs' left behind: their containers end with them; a stray one is swept.
    sweep_orphans([], scope=SCOPE)
    results["stdio (search.find, in the sandbox, runc)"] = summary(
        {"sdk_session_per_call": each, "harness_transport": transport, "harness_gated": gates}
    )
    return results


if __name__ == "__main__":
    main()
