"""What the sandbox costs, measured in one run against the real Docker engine:

- a file tool (read_file) through the real Harness with the real SandboxExecutor
  (target: median under 5 ms);
- run_check of the example's test suite through the Harness, against a raw
  ``docker exec`` of the same command in the same container, interleaved
  (target: median ratio at most 1.2);
- starting (and removing) a run's container;
- a raw exec of a bare Python start-up;

each under every runtime asked for (runc and gVisor's runsc by default), side by
side, with the runsc/runc ratio. runsc is measured on the engine at ``--runsc-host``
(default: the same engine; it must have runsc registered, as scripts/start_docker.sh
does).

    python bench/sandbox_overhead.py [--reads N] [--checks N] [--starts N]
        [--runtimes runc,runsc] [--runsc-host unix:///...] [--json]

The harness runs with in-memory state, approvals and artifacts, so the numbers are
the loop plus the sandbox, without database checkpoints (bench/loop_overhead.py
measures those)."""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from machine import load  # noqa: E402
from machine import machine as describe_machine  # noqa: E402

from core.contract import Contract, WorkspaceSource  # noqa: E402
from core.feedback import Result  # noqa: E402
from core.loop import Harness, new_state  # noqa: E402
from core.policy import CheckDef, Policy, SandboxLimits  # noqa: E402
from core.scripted import ScriptedProposer  # noqa: E402
from core.simulated import MemoryApprovals, MemoryArtifacts, MemoryStore  # noqa: E402
from core.tools import builtin_registry  # noqa: E402
from sandbox.container.client import docker_host, shared_client  # noqa: E402
from sandbox.container.sandbox_container import SandboxContainer  # noqa: E402
from sandbox.container.spec import SANDBOX_USER, WORKDIR, ContainerSpec  # noqa: E402
from sandbox.executor import SandboxExecutor  # noqa: E402
from sandbox.tools.context import MemoryOutbox, ToolSettings  # noqa: E402
from sandbox.workspace.preparation import prepare_workspace  # noqa: E402

TESTS = CheckDef(check_id="tests", command=["python3", "-m", "pytest", "-q", "-p", "no:cacheprovider"], timeout_seconds=120)
LIMITS = SandboxLimits()  # the default policy's: 512m, 1 CPU, 128 pids
PYTHON_STARTUP = ["python3", "-c", "pass"]


def harness_for(
    executor: SandboxExecutor,
    script: Callable[[Any, int], object | None],
    steps: int,
    check: CheckDef = TESTS,
    write_paths: tuple[str, ...] = (),
) -> Harness:
    policy = Policy.model_validate(
        {
            "version": 1,
            "rules": [{"name": "all", "tool": "*", "decision": "allow"}],
            "checks": [check.model_dump()],
            "budget": {
                "max_proposals": steps + 5,
                "max_tool_calls": steps + 5,
                "max_attempts": 1,
                "wall_time_seconds": 3600,
                "max_output_bytes_per_call": 1_000_000,
            },
        }
    )
    contract = Contract.model_validate(
        {
            "task_id": "bench",
            "objective": "measure the sandbox",
            "acceptance_criteria": ["numbers"],
            "workspace": {"kind": "path", "path": "examples/orders"},
            "allowed_write_paths": list(write_paths) or ["orders/*"],
            "allowed_tools": ["read_file", "run_check", *(["write_file"] if write_paths else [])],
            "verification_targets": [check.check_id],
            "limits": policy.budget.model_dump(),
        }
    )
    state = new_state(
        run_id=executor.run_id, contract=contract, policy=policy, actor="bench", revision=executor.revision(), now=time.time()
    )
    return Harness(
        state,
        registry=builtin_registry(),
        policy=policy,
        proposer=ScriptedProposer(script),
        executor=executor,
        workspace=executor,
        approvals=MemoryApprovals(),
        store=MemoryStore(verify=False),
        artifacts=MemoryArtifacts(),
    )


def step_times(
    executor: SandboxExecutor,
    proposal: dict[str, Any] | Callable[[int], dict[str, Any]],
    steps: int,
    before_each: Callable[[], None] | None = None,
    check: CheckDef = TESTS,
    write_paths: tuple[str, ...] = (),
) -> list[float]:
    """Seconds from handing the harness a proposal until it asks for the next one."""
    handed: list[float] = []
    asked: list[float] = []

    def script(feedback: Any, position: int) -> object | None:
        asked.append(time.perf_counter())
        if feedback is not None and not isinstance(feedback, Result):
            raise RuntimeError(f"unexpected feedback: {feedback}")
        if position >= steps:
            return None
        if before_each is not None:
            before_each()
        handed.append(time.perf_counter())
        return proposal(position) if callable(proposal) else proposal

    harness_for(executor, script, steps, check, write_paths).run()
    return [asked[i + 1] - handed[i] for i in range(steps)]


def raw_cli(container_id: str, command: list[str] = TESTS.command) -> float:
    started = time.perf_counter()
    subprocess.run(
        ["docker", "exec", "-u", SANDBOX_USER, "-w", WORKDIR, container_id, *command],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        check=False,
        env={**os.environ, "DOCKER_HOST": docker_host()},
    )
    return time.perf_counter() - started


def raw_sdk(container_id: str, command: list[str] = TESTS.command) -> float:
    started = time.perf_counter()
    shared_client().api.exec_start(shared_client().api.exec_create(container_id, command, user=SANDBOX_USER, workdir=WORKDIR)["Id"])
    return time.perf_counter() - started


def summary(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {
        "median_ms": statistics.median(ordered) * 1000,
        "p90_ms": ordered[int(0.9 * (len(ordered) - 1))] * 1000,
        "n": len(ordered),
    }


def measure(reads: int, checks: int, starts: int, image: str, runtime: str) -> dict[str, Any]:
    limits = LIMITS.model_copy(update={"runtime": runtime})
    with tempfile.TemporaryDirectory(prefix="harness-bench-") as tmp:
        workspace = prepare_workspace(Path(tmp) / "run", WorkspaceSource(kind="path", path="examples/orders"), ROOT, (ROOT,))
        container = SandboxContainer.start("bench", workspace.dir, ContainerSpec.from_limits(limits, image), scope="bench")
        try:
            executor = SandboxExecutor(
                "bench", workspace, container, MemoryArtifacts(), MemoryOutbox(), ToolSettings(write_paths=("orders/*",))
            )
            read = {"tool": "read_file", "args": {"path": "orders/total.py"}}
            step_times(executor, read, 50)  # warm-up
            read_times = step_times(executor, read, reads)[10:]

            cli: list[float] = []
            sdk: list[float] = []
            check = {"tool": "run_check", "args": {"check_id": "tests"}}
            for _ in range(2):  # warm-up: page cache, Python start-up in the container
                raw_cli(container.id)
                raw_sdk(container.id)

            def raw_pair() -> None:
                cli.append(raw_cli(container.id))
                sdk.append(raw_sdk(container.id))

            check_times = step_times(executor, check, checks, before_each=raw_pair)
            startup = [raw_sdk(container.id, PYTHON_STARTUP) for _ in range(checks * 3)]
        finally:
            container.remove()

        start_times: list[float] = []
        remove_times: list[float] = []
        for n in range(starts):
            began = time.perf_counter()
            fresh = SandboxContainer.start(f"bench-start-{n}", workspace.dir, ContainerSpec.from_limits(limits, image), scope="bench")
            start_times.append(time.perf_counter() - began)
            began = time.perf_counter()
            fresh.remove()
            remove_times.append(time.perf_counter() - began)

    result: dict[str, Any] = {
        "read_file_through_harness": summary(read_times),
        "run_check_through_harness": summary(check_times),
        "raw_docker_exec_cli": summary(cli),
        "raw_docker_exec_sdk": summary(sdk),
        "raw_python_startup_sdk": summary(startup),
        "container_start": summary(start_times),
        "container_remove": summary(remove_times),
    }
    result["ratio_run_check_vs_cli"] = statistics.median(h / r for h, r in zip(check_times, cli, strict=True))
    result["ratio_run_check_vs_sdk"] = statistics.median(h / r for h, r in zip(check_times, sdk, strict=True))
    result["load"] = load()
    return result


def paired_startup(hosts: dict[str, str], image: str, pairs: int) -> dict[str, Any]:
    """``python3 -c pass`` by raw exec, alternating between a runc and a runsc
    container (each on its engine), so load on the machine hits both alike."""
    containers: dict[str, SandboxContainer] = {}
    times: dict[str, list[float]] = {"runc": [], "runsc": []}
    with tempfile.TemporaryDirectory(prefix="harness-bench-") as tmp:
        workspace = prepare_workspace(Path(tmp) / "run", WorkspaceSource(kind="path", path="examples/orders"), ROOT, (ROOT,))
        try:
            for runtime in times:
                os.environ["DOCKER_HOST"] = hosts[runtime]
                spec = ContainerSpec.from_limits(LIMITS.model_copy(update={"runtime": runtime}), image)
                containers[runtime] = SandboxContainer.start(f"bench-pair-{runtime}", workspace.dir, spec, scope="bench")
            for n in range(pairs + 3):
                for runtime in times:
                    os.environ["DOCKER_HOST"] = hosts[runtime]
                    took = raw_sdk(containers[runtime].id, PYTHON_STARTUP)
                    if n >= 3:  # warm-up
                        times[runtime].append(took)
        finally:
            for runtime, container in containers.items():
                os.environ["DOCKER_HOST"] = hosts[runtime]
                container.remove()
    return {
        "runc": summary(times["runc"]),
        "runsc": summary(times["runsc"]),
        "ratio_runsc_vs_runc": statistics.median(b / a for a, b in zip(times["runc"], times["runsc"], strict=True)),
    }


def machine() -> str:
    return f"{describe_machine()}, Docker {shared_client().version().get('Version', '?')}"


ROWS = [
    ("read_file through the harness", "read_file_through_harness", "< 5 ms"),
    ("run_check (tests) through the harness", "run_check_through_harness", ""),
    ("raw `docker exec` (CLI), same command", "raw_docker_exec_cli", ""),
    ("raw exec via the SDK, same command", "raw_docker_exec_sdk", ""),
    ("raw exec via the SDK, `python3 -c pass`", "raw_python_startup_sdk", ""),
    ("container start (create + start)", "container_start", ""),
    ("container remove", "container_remove", ""),
]


def table(results: dict[str, dict[str, Any]]) -> str:
    """Median (p90) per runtime, side by side, and runsc/runc where both ran."""
    runtimes = list(results)
    both = "runc" in results and "runsc" in results
    head = "| measurement | " + " | ".join(f"{r} median (p90)" for r in runtimes) + (" | runsc / runc |" if both else " |") + " target |"
    lines = [head, "| --- |" + " ---: |" * (len(runtimes) + both) + " --- |"]
    for label, key, target in ROWS:
        cells = [f"{results[r][key]['median_ms']:.2f} ms ({results[r][key]['p90_ms']:.2f})" for r in runtimes]
        if both:
            cells.append(f"{results['runsc'][key]['median_ms'] / results['runc'][key]['median_ms']:.2f}x")
        lines.append(f"| {label} | " + " | ".join(cells) + f" | {target} |")
    for label, key, target in [
        ("run_check / raw CLI exec (median of paired ratios)", "ratio_run_check_vs_cli", "≤ 1.2"),
        ("run_check / raw SDK exec (median of paired ratios)", "ratio_run_check_vs_sdk", ""),
    ]:
        cells = [f"{results[r][key]:.3f}" for r in runtimes] + ([""] if both else [])
        lines.append(f"| {label} | " + " | ".join(cells) + f" | {target} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reads", type=int, default=1000)
    parser.add_argument("--checks", type=int, default=20)
    parser.add_argument("--starts", type=int, default=10)
    parser.add_argument("--image", default=os.environ.get("HARNESS_SANDBOX_IMAGE", "harness-sandbox:latest"))
    parser.add_argument("--runtimes", default="runc,runsc", help="comma-separated: runc, runsc")
    parser.add_argument("--runsc-host", default=None, help="the engine with runsc registered (default: DOCKER_HOST)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    main_host = docker_host()
    hosts = {"runc": main_host, "runsc": args.runsc_host or main_host}
    results: dict[str, dict[str, Any]] = {}
    for runtime in args.runtimes.split(","):
        os.environ["DOCKER_HOST"] = hosts[runtime]  # the client factories read it outside Django
        shared_client().ping()
        results[runtime] = measure(args.reads, args.checks, args.starts, args.image, runtime)
    paired = paired_startup(hosts, args.image, args.checks * 3) if set(results) == {"runc", "runsc"} else None
    os.environ["DOCKER_HOST"] = main_host
    report = {
        "machine": machine(),
        "load": load(),
        "date": datetime.now(UTC).strftime("%Y-%m-%d"),
        "engines": hosts,
        "results": results,
        "python_startup_paired": paired,
    }
    if args.json:
        print(json.dumps(report, indent=2))
        return
    print(f"Sandbox overhead on {report['machine']} ({report['date']}, engines {hosts})\n")
    print(table(results))
    if paired is not None:
        print(
            f"\n`python3 -c pass` by raw exec, runc and runsc alternating ({paired['runc']['n']} pairs): "
            f"runc {paired['runc']['median_ms']:.1f} ms, runsc {paired['runsc']['median_ms']:.1f} ms median; "
            f"runsc / runc {paired['ratio_runsc_vs_runc']:.2f} (median of paired ratios)"
        )


if __name__ == "__main__":
    main()
