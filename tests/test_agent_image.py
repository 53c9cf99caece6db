"""The agent image (sandbox/agent/image/build.sh): built once by content, a second
build a cache hit; the pinned CLIs (sandbox/agent/clis) run in it as the agent, in its
container, with nothing but their --version to do; what it carries is the root's and
read-only to the agent."""

from __future__ import annotations

import json
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import docker
import pytest

from sandbox.agent.container import AGENT_SPEC, HOME_DIR, AgentContainer, Gateway
from tests.fixtures_sandbox import AGENT_IMAGE_BUILD, ROOT, SCOPE

PINNED = json.loads((ROOT / "sandbox" / "agent" / "clis" / "package.json").read_text())["dependencies"]
CLIS = {"claude": "@anthropic-ai/claude-code", "codex": "@openai/codex", "gemini": "@google/gemini-cli"}


@pytest.fixture
def box(agent_image: str, tmp_path: Path) -> Iterator[AgentContainer]:
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    run_id = f"agent-image-{uuid.uuid4().hex[:8]}"
    # No gateway answers: the CLIs only say their versions.
    made = AgentContainer.start(
        run_id,
        workspace,
        Gateway.for_run("http://127.0.0.1:9", run_id),
        lambda *_: None,
        spec=replace(AGENT_SPEC, image=agent_image),
        scope=SCOPE,
    )
    try:
        yield made
    finally:
        made.close()


def run(box: AgentContainer, *argv: str) -> tuple[int | None, str]:
    out: list[bytes] = []
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": HOME_DIR, "NO_COLOR": "1", "CI": "1"}
    result = box.run(list(argv), env, on_output=lambda _stream, data: out.append(data), timeout_seconds=120)
    return result.exit_code, b"".join(out).decode(errors="replace")


@pytest.mark.docker
def test_it_builds_the_image_once_and_then_hits_its_cache(agent_image: str, docker_engine: docker.DockerClient) -> None:
    started = time.monotonic()
    again = subprocess.run(["bash", str(AGENT_IMAGE_BUILD)], capture_output=True, text=True, timeout=600, check=True)
    assert time.monotonic() - started < 30
    assert again.stdout.strip().splitlines()[-1] == agent_image
    assert f"cache hit: {agent_image}" in again.stderr
    labels = docker_engine.images.get(agent_image).labels
    assert labels["org.harness.image.digest"] == agent_image.rsplit(":", 1)[1]


@pytest.mark.docker
@pytest.mark.parametrize("command", sorted(CLIS))
def test_it_runs_each_pinned_cli_in_the_agent_container(box: AgentContainer, command: str) -> None:
    code, said = run(box, command, "--version")
    assert code == 0, said
    assert PINNED[CLIS[command]] in said, said


@pytest.mark.docker
def test_it_keeps_what_the_image_carries_out_of_the_agent_s_reach(box: AgentContainer) -> None:
    probe = (
        "const fs = require('fs'); const got = {};"
        "for (const p of ['/opt/agent-clis/node_modules/.bin/x', '/usr/bin/node', '/opt/harness/relay.py', '/workspace/x', '/tmp/x']) {"
        " try { fs.writeFileSync(p, 'x'); got[p] = 'written'; } catch (e) { got[p] = e.code; } }"
        "got.owner = fs.statSync('/opt/agent-clis/node_modules/@openai/codex/package.json').uid;"
        "got.node = process.version;"
        "console.log(JSON.stringify(got));"
    )
    code, said = run(box, "node", "-e", probe)
    assert code == 0, said
    got = json.loads(said.strip().splitlines()[-1])
    assert got == {
        "/opt/agent-clis/node_modules/.bin/x": "EROFS",
        "/usr/bin/node": "EROFS",
        "/opt/harness/relay.py": "EROFS",
        "/workspace/x": "EROFS",
        "/tmp/x": "written",
        "owner": 0,
        "node": subprocess.run(["node", "--version"], capture_output=True, text=True, check=True).stdout.strip(),
    }
