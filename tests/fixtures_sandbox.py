"""Sandbox fixtures: the real Docker engine and image, the example workspace, and a
way to drive the real Harness against the SandboxExecutor.

Containers made here carry a scope label unique to this test process, so cleanup
(and the sweeper under test) never touches another process's containers. Modules
that need Django's app registry are imported inside the fixtures, so this plugin
can be loaded before Django is set up."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import docker
import pytest
from django.conf import settings
from docker.errors import DockerException, ImageNotFound

from core.contract import Contract, WorkspaceSource
from core.events import Event
from core.loop import Harness, new_state
from core.policy import CheckDef, Policy, SandboxLimits
from core.ports import Call
from core.scripted import ScriptedProposer, ScriptFn
from core.simulated import MemoryApprovals, MemoryStore
from core.state import RunState
from core.tools import builtin_registry
from sandbox.container.client import docker_host, new_client
from sandbox.container.engine import engine_answers
from sandbox.container.orphans import sweep_orphans
from sandbox.container.sandbox_container import SandboxContainer
from sandbox.container.spec import ContainerSpec
from sandbox.executor import SandboxExecutor
from sandbox.tools.context import ToolSettings
from sandbox.workspace import hashing
from sandbox.workspace.preparation import prepare_workspace
from sandbox.workspace.run_workspace import RunWorkspace
from tests.fixtures_runtimes import RuntimeEngine

ROOT = Path(__file__).resolve().parent.parent
AGENT_IMAGE_BUILD = ROOT / "sandbox" / "agent" / "image" / "build.sh"
SCOPE = f"test-{os.getpid()}-{uuid.uuid4().hex[:6]}"
WRITE_PATHS = ("orders/*",)
TEST_LIMITS = SandboxLimits(memory="256m", cpus=1.0, pids_limit=64)
ALL_TOOLS = ["list_files", "read_file", "search", "write_file", "apply_patch", "run_check", "publish", "lookup_publish", "finish"]
SMOKE = CheckDef(check_id="smoke", command=["python3", "-c", "print('sandbox alive')"], timeout_seconds=30)
TESTS = CheckDef(check_id="tests", command=["python3", "-m", "pytest", "-q", "-p", "no:cacheprovider"], timeout_seconds=120)


@pytest.fixture(scope="session")
def docker_engine() -> Iterator[docker.DockerClient]:
    client = new_client()
    try:
        client.ping()
    except DockerException as exc:
        pytest.fail(f"no Docker engine at {docker_host()} ({exc}); start one with: bash scripts/start_docker.sh")
    try:
        client.images.get(settings.SANDBOX_IMAGE)
    except ImageNotFound:
        pytest.fail(f"sandbox image {settings.SANDBOX_IMAGE} is missing; build it with: bash sandbox/image/build.sh")
    yield client
    sweep_orphans([], scope=SCOPE, client=client)


@pytest.fixture(scope="session")
def agent_image(docker_engine: docker.DockerClient) -> str:
    """The agent image (sandbox/agent) built from this checkout: a cache hit when it is
    current, as the relay it carries must be this checkout's."""
    done = subprocess.run(["bash", str(AGENT_IMAGE_BUILD)], capture_output=True, text=True, timeout=1800, check=False)
    if done.returncode != 0:
        pytest.fail(f"the agent image did not build (bash {AGENT_IMAGE_BUILD}):\n{done.stderr[-3000:]}")
    return done.stdout.strip().splitlines()[-1]


@pytest.fixture(scope="session", autouse=True)
def no_run_containers_left() -> Iterator[None]:
    """The runs a session drives in-process or through its workers (runs.runtime) get
    containers in the session's own scope (harness_site.test_settings); a run still
    waiting when its test ends keeps its container, as a live one would, so the session
    removes what is left of its scope when it ends."""
    yield
    if not engine_answers():
        return  # no engine (a fast selection on a machine without one): nothing of this session's can be on it
    sweep_orphans([], scope=settings.SANDBOX_SCOPE, client=new_client())


def example_workspace(root: Path, path: str = "examples/orders") -> RunWorkspace:
    return prepare_workspace(root, WorkspaceSource(kind="path", path=path), ROOT, (ROOT,))


def count_walks(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The roots of the full walks made from now on (in this process)."""
    walks: list[str] = []
    real = hashing.TreeHasher.tree

    def counted(self: hashing.TreeHasher, root: Path, sink: hashing.TreeSink | None = None) -> str:
        walks.append(str(root))
        return real(self, root, sink)

    monkeypatch.setattr(hashing.TreeHasher, "tree", counted)
    return walks


def reset_workspace(workspace: RunWorkspace) -> None:
    """Back to the pristine source, in place: the directory itself is bind-mounted
    into a running container and must stay the same inode."""
    for child in workspace.dir.iterdir():
        if child.is_dir() and not child.is_symlink():
            shutil.rmtree(child)
        else:
            child.unlink()
    shutil.copytree(workspace.pristine, workspace.dir, symlinks=True, dirs_exist_ok=True)
    for dirpath, dirnames, filenames in os.walk(workspace.dir):
        for name in [dirpath, *(os.path.join(dirpath, n) for n in dirnames + filenames)]:
            os.lchown(name, 65534, 65534)
    # Changed behind the harness's tools: only a walk sees it. A test that made the
    # index refuse (a check that found the tree changed) must not leave the next one a
    # workspace that refuses too.
    (workspace.index.dir / "broken").unlink(missing_ok=True)
    workspace.reread()


def start_container(run_id: str, workspace: RunWorkspace, limits: SandboxLimits = TEST_LIMITS) -> SandboxContainer:
    return SandboxContainer.start(run_id, workspace.dir, ContainerSpec.from_limits(limits, settings.SANDBOX_IMAGE), scope=SCOPE)


@dataclass
class ModuleSandbox:
    run_id: str
    workspace: RunWorkspace
    container: SandboxContainer
    engine: RuntimeEngine


@pytest.fixture(scope="module")
def module_sandbox(runtime_engine: RuntimeEngine, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ModuleSandbox]:
    """One workspace and container per test module and runtime; each test resets the
    workspace."""
    run_id = f"module-{runtime_engine.runtime}-{uuid.uuid4().hex[:8]}"
    workspace = example_workspace(tmp_path_factory.mktemp("sandbox") / run_id)
    container = start_container(run_id, workspace, runtime_engine.limits(TEST_LIMITS))
    yield ModuleSandbox(run_id, workspace, container, runtime_engine)
    container.remove()


@pytest.fixture
def sandbox(module_sandbox: ModuleSandbox, tmp_path: Path, db: None) -> SandboxExecutor:
    from runs.persistence.artifacts import ArtifactStorage
    from runs.persistence.outbox import DatabaseOutbox

    reset_workspace(module_sandbox.workspace)
    module_sandbox.container.kill_processes()
    return SandboxExecutor(
        module_sandbox.run_id,
        module_sandbox.workspace,
        module_sandbox.container,
        ArtifactStorage(),
        DatabaseOutbox(),
        ToolSettings(write_paths=WRITE_PATHS, spool_dir=tmp_path / "spool"),
    )


@pytest.fixture
def host_executor(tmp_path: Path, db: None) -> SandboxExecutor:
    """The example workspace with no container: file tools and publishing only."""
    from runs.persistence.artifacts import ArtifactStorage
    from runs.persistence.outbox import DatabaseOutbox

    workspace = example_workspace(tmp_path / "run")
    return SandboxExecutor(
        f"host-{uuid.uuid4().hex[:8]}", workspace, None, ArtifactStorage(), DatabaseOutbox(), ToolSettings(write_paths=WRITE_PATHS)
    )


def make_call(tool: str, args: dict[str, Any], *, check: CheckDef | None = None, key: str | None = None, cap: int = 100_000) -> Call:
    return Call(
        run_id="direct",
        call_id=f"d-{uuid.uuid4().hex[:6]}",
        tool=tool,
        tool_version="1",
        args=args,
        attempt=1,
        idempotency_key=key,
        max_output_bytes=cap,
        check=check,
    )


# When a test's external calls are dated: a fixed time, so a commit's id is too.
FIXED_AT = 1_767_225_600.0


def fixed_call(executor: Any, tool: str, args: dict[str, Any], key: str, at: float = FIXED_AT) -> Call:
    """A call to an external tool with its effect fixed by ``executor`` first, as the
    loop fixes it before asking a reviewer (core.effects)."""
    plan = executor.plan(tool, args, key, at)
    return dataclasses.replace(make_call(tool, args, key=key), effect=plan.effect if plan is not None else None)


def shown(executor: Any, tool: str, args: dict[str, Any], key: str = "0" * 32, at: float = FIXED_AT) -> str:
    """What a reviewer is shown of an external call (its fixed effect's text)."""
    plan = executor.plan(tool, args, key, at)
    assert plan is not None, tool
    return str(plan.shown)


def sandbox_policy(*checks: CheckDef, limits: SandboxLimits = TEST_LIMITS, allow_publish: bool = False) -> Policy:
    """The default policy with these checks; ``allow_publish`` lets publish through
    without a reviewer (it still needs current evidence)."""
    document = json.loads((ROOT / "approvals" / "default_policy.json").read_text())
    document["checks"] = [TESTS.model_dump(), SMOKE.model_dump(), *(c.model_dump() for c in checks)]
    document["sandbox"] = limits.model_dump()
    if allow_publish:
        document["rules"] = [{**r, "decision": "allow"} if r["tool"] == "publish" else r for r in document["rules"]]
    return Policy.model_validate(document)


def sandbox_contract(targets: Sequence[str] = ("smoke",), max_output_bytes: int = 100_000) -> Contract:
    return Contract.model_validate(
        {
            "task_id": "sandbox-test",
            "objective": "exercise the sandbox",
            "acceptance_criteria": ["the run survives"],
            "workspace": {"kind": "path", "path": "examples/orders"},
            "allowed_write_paths": list(WRITE_PATHS),
            "allowed_tools": ALL_TOOLS,
            "verification_targets": list(targets),
            "limits": {
                "max_proposals": 50,
                "max_tool_calls": 50,
                "max_attempts": 2,
                "wall_time_seconds": 600,
                "max_output_bytes_per_call": max_output_bytes,
            },
        }
    )


@dataclass
class Outcome:
    state: RunState
    events: list[Event]
    seconds: float

    def of_type(self, kind: str) -> list[Any]:
        return [e for e in self.events if getattr(e, "type", None) == kind]

    def receipts(self, tool: str) -> list[dict[str, Any]]:
        return [e.receipt for e in self.of_type("receipt_recorded") if e.valid and e.tool == tool]

    def receipt(self, tool: str, check_id: str | None = None) -> dict[str, Any]:
        found = [r for r in self.receipts(tool) if check_id is None or r["data"].get("check_id") == check_id]
        assert len(found) == 1, f"expected one {tool} receipt for {check_id}, got {len(found)}: {self.summary()}"
        return found[0]

    def summary(self) -> list[str]:
        return [f"{e.seq} {getattr(e, 'type', '?')} {e.call_id or ''}" for e in self.events]


def drive(
    executor: SandboxExecutor,
    policy: Policy,
    script: Sequence[dict[str, Any]] | ScriptFn,
    contract: Contract | None = None,
    **harness_options: Any,
) -> Outcome:
    """The real Harness with in-memory state and approvals, the real executor."""
    from runs.persistence.artifacts import ArtifactStorage

    state = new_state(
        run_id=executor.run_id,
        contract=contract or sandbox_contract(),
        policy=policy,
        actor="tester",
        revision=executor.revision(),
        now=time.time(),
    )
    store = MemoryStore()
    harness = Harness(
        state,
        registry=builtin_registry(),
        policy=policy,
        proposer=ScriptedProposer(script if callable(script) else list(script)),
        executor=executor,
        workspace=executor,
        approvals=MemoryApprovals(),
        store=store,
        artifacts=ArtifactStorage(),
        **harness_options,
    )
    started = time.monotonic()
    final = harness.run()
    return Outcome(final, store.events, time.monotonic() - started)


def step(tool: str, **args: Any) -> dict[str, Any]:
    return {"tool": tool, "args": args}


SURVIVE = [step("run_check", check_id="smoke"), step("finish", summary="still standing")]
