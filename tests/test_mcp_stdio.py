"""MCP servers over stdio inside the run's sandbox container (docs/design.md, Outside
tools), from the sandbox image as built (sandbox/image/build.sh): its workspace search
(/opt/harness-mcp/bin/workspace-search) and a probe of the tests' own run by the image's
Python with the SDK (tests/mcp_servers/sandbox_probe.py), each named by an admin's
McpServer row; whole runs driven in this process (runs.runtime.advance)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docker
import pytest
from django.contrib.auth.models import User
from pytest_django import Settings

from approvals.policies import current_policy_row
from projects.models import McpServer, default_project_id
from runs.models import Event, Run
from runs.runtime import advance, create_run
from tests.helpers import new_policy_version
from tests.runs_waiting import DEMO_CONTRACT

pytestmark = [pytest.mark.docker, pytest.mark.slow, pytest.mark.django_db(transaction=True)]

ENV_CHECK = {"check_id": "env", "command": ["env"], "version": "1", "timeout_seconds": 60}
PROBE = (Path(__file__).parent / "mcp_servers" / "sandbox_probe.py").read_text()


@pytest.fixture
def search(tmp_path: Path, settings: Settings, docker_engine: Any) -> Iterator[None]:
    settings.WORKSPACE_ROOT = tmp_path / "workspaces"
    settings.SPOOL_DIR = tmp_path / "spool"
    try:
        # Through a shell: a missing program would fail the start and leave the container.
        probe = ["sh", "-c", "test -x /opt/harness-mcp/bin/python && /opt/harness-mcp/bin/python -c 'import mcp'"]
        docker_engine.containers.run(settings.SANDBOX_IMAGE, probe, network_mode="none", remove=True)
    except docker.errors.ContainerError:
        pytest.fail(f"the sandbox image {settings.SANDBOX_IMAGE} has no MCP SDK; build it with: bash sandbox/image/build.sh")
    project = default_project_id()
    McpServer.objects.create(project_id=project, name="search", command=["/opt/harness-mcp/bin/workspace-search"], timeout_seconds=30)
    McpServer.objects.create(
        project_id=project, name="probe", command=["/opt/harness-mcp/bin/python", "-c", PROBE], timeout_seconds=30, max_response_mb=1
    )
    yield


def policy(*rules: dict[str, Any], runtime: str = "runc") -> None:
    sandbox = {**current_policy_row().document["sandbox"], "runtime": runtime}
    new_policy_version(
        sandbox=sandbox,
        rules=[
            {"name": "finishing", "tool": "finish", "decision": "allow"},
            {"name": "the env check", "tool": "run_check", "decision": "allow"},
            *rules,
        ],
        read_only_tools=["search.find", "probe.interfaces", "probe.flood"],
        checks=[ENV_CHECK],
    )


def start(operator: User, *script: dict[str, Any]) -> Run:
    tools = sorted({"run_check", *(step["tool"] for step in script)})
    contract = {**DEMO_CONTRACT, "allowed_tools": tools, "verification_targets": ["env"]}
    steps = [{"tool": "run_check", "args": {"check_id": "env"}}, *script, {"tool": "finish", "args": {"summary": "done"}}]
    return create_run(contract, {"kind": "scripted", "script": steps}, operator, enqueue=False)


def events(run: Run, kind: str) -> list[dict[str, Any]]:
    return [{"type": e.type, **e.payload} for e in Event.objects.filter(run=run, type=kind).order_by("seq")]


@pytest.mark.parametrize("runtime", ["runc", "runsc"])
def test_it_searches_the_workspace_with_a_server_run_in_the_sandbox_without_network(search: None, operator: User, runtime: str) -> None:
    policy({"name": "servers", "tool": "*.*", "decision": "allow"}, runtime=runtime)
    run = start(
        operator,
        {"tool": "search.find", "args": {"text": "def order_total"}},
        {"tool": "probe.interfaces", "args": {}},
    )
    assert advance(str(run.pk)) == "complete"
    received = {e["tool"]: e["receipt"]["data"] for e in events(run, "receipt_recorded")}
    found = received["search.find"]
    assert found["untrusted"] is True and found["server"] == "search"
    assert found["structured"]["hits"] == [
        {
            "path": "orders/total.py",
            "line": 8,
            "text": "def order_total(lines: Iterable[Mapping[str, int]], discount_percent: int = 0) -> int:",
        }
    ]
    assert found["structured"]["truncated"] is False
    # The server shares the run's container, which has no network: loopback alone.
    seen = received["probe.interfaces"]["structured"]
    assert seen["interfaces"] == ["lo"]
    # Under runsc the server runs on gVisor's kernel, not the host's.
    assert (seen["kernel"] == Path("/proc/version").read_text()) == (runtime == "runc")


def test_it_denies_a_tool_of_a_stdio_server_the_policy_does_not_allow(search: None, operator: User) -> None:
    policy({"name": "no search", "tool": "search.find", "decision": "deny"})
    denied = start(operator, {"tool": "search.find", "args": {"text": "order"}})
    assert advance(str(denied.pk)) == "tool_denied"
    [refusal] = events(denied, "denied")
    assert refusal["rule"] == "no search"
    assert not [e for e in events(denied, "receipt_recorded") if e["tool"] == "search.find"]

    unnamed = start(operator, {"tool": "probe.interfaces", "args": {}})
    assert advance(str(unnamed.pk)) == "tool_denied"
    [refusal] = events(unnamed, "denied")
    assert refusal["rule"] == "default: no rule matched"


def test_it_cuts_off_a_stdio_server_that_sends_more_than_its_cap(search: None, operator: User) -> None:
    policy({"name": "servers", "tool": "*.*", "decision": "allow"})
    run = start(operator, {"tool": "probe.flood", "args": {"megabytes": 3}}, {"tool": "probe.interfaces", "args": {}})
    assert advance(str(run.pk)) == "complete"
    received = {e["tool"]: e["receipt"]["data"] for e in events(run, "receipt_recorded")}
    assert "sent more than 1048576 bytes" in received["probe.flood"]["error"]
    # The next conversation starts its server afresh: the flood left nothing behind.
    assert received["probe.interfaces"]["structured"]["interfaces"] == ["lo"]
