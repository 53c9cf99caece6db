"""run_check against its floor, the Docker SDK's own exec of the same command in the
same container, for a bare ``python3 -c pass`` and for the example's pytest suite:

- **requests to the engine** per check, each side (counted at the transport:
  bench/engine_requests.py);
- **instructions** per check in this process, each side, counted by callgrind around
  the checks only (bench/instructions.py: N checks of each side and command in turn,
  each after its warm-up, in one process under callgrind), the figure the machine's
  load does not change;
- **wall time**, run_check and the raw exec alternating (raw, run_check, run_check,
  raw, ...), the ratio the median of the per-pair ratios.

run_check is the tool as the executor runs it (``SandboxExecutor.execute``: the
quota's look, the container's execution under the wrapper, the output spooled and
stored as an artifact, the receipt), without the harness's loop around it
(bench/sandbox_overhead.py measures a check through the loop). The raw exec is
``exec_create`` and ``exec_start`` of the same command, as the same user in the same
directory, its output read whole, through a client as docker-py makes it by default
(``docker.DockerClient(base_url=...)``), not the product's.

    python bench/check_floor.py [--pairs N] [--calls N] [--no-callgrind] [--json]

``--calls``: checks of each side and command under callgrind (the count is per check).
``--measure N``: what callgrind runs (N checks of each side and command, measured in
turn)."""

from __future__ import annotations

import argparse
import functools
import itertools
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import docker  # noqa: E402
from machine import load, machine, now  # noqa: E402

from bench.engine_requests import counting  # noqa: E402
from bench.instructions import available, measured, parts  # noqa: E402
from core.contract import WorkspaceSource  # noqa: E402
from core.policy import CheckDef, SandboxLimits  # noqa: E402
from core.ports import Call  # noqa: E402
from core.simulated import MemoryArtifacts  # noqa: E402
from sandbox.container.client import docker_host  # noqa: E402
from sandbox.container.sandbox_container import SandboxContainer  # noqa: E402
from sandbox.container.spec import SANDBOX_USER, WORKDIR, ContainerSpec  # noqa: E402
from sandbox.executor import SandboxExecutor  # noqa: E402
from sandbox.tools.context import MemoryOutbox, ToolSettings  # noqa: E402
from sandbox.workspace.preparation import prepare_workspace  # noqa: E402

COMMANDS = {
    "pass": ["python3", "-c", "pass"],
    "pytest": ["python3", "-m", "pytest", "-q", "-p", "no:cacheprovider"],
}
WARM_UP = 2
KINDS = ("raw", "run_check")
RUN_ID = f"bench-floor-{os.getpid()}"  # its own container, beside any other run of this


@contextmanager
def sandbox(image: str) -> Iterator[SandboxExecutor]:
    with tempfile.TemporaryDirectory(prefix="harness-bench-") as tmp:
        workspace = prepare_workspace(Path(tmp) / "run", WorkspaceSource(kind="path", path="examples/orders"), ROOT, (ROOT,))
        container = SandboxContainer.start(RUN_ID, workspace.dir, ContainerSpec.from_limits(SandboxLimits(), image), scope="bench")
        try:
            yield SandboxExecutor(RUN_ID, workspace, container, MemoryArtifacts(), MemoryOutbox(), ToolSettings(write_paths=()))
        finally:
            container.remove()


def sides(executor: SandboxExecutor, command: list[str]) -> dict[str, Callable[[], object]]:
    """Each side as one call that runs the command once."""
    assert executor.container is not None
    container_id = executor.container.id
    check = CheckDef(check_id="floor", command=command, timeout_seconds=120)
    n = itertools.count()
    api = docker.DockerClient(base_url=docker_host()).api  # the SDK's defaults

    def run_check() -> object:
        seq = next(n)
        call = Call(RUN_ID, f"c{seq}", "run_check", "1", {"check_id": "floor"}, 1, None, 1_000_000, check=check)
        result = executor.execute(call)
        assert isinstance(result, dict) and result["status"] == "ok", result
        return result

    def raw() -> object:
        return api.exec_start(api.exec_create(container_id, command, user=SANDBOX_USER, workdir=WORKDIR)["Id"])

    return {"run_check": run_check, "raw": raw}


def repeat(side: Callable[[], object], calls: int) -> None:
    for _ in range(calls):
        side()


def measure(image: str, calls: int) -> None:
    """What callgrind runs: ``calls`` checks of each side and command in turn, each
    measured apart, after a warm-up of its own."""
    with sandbox(image) as executor:
        for command in COMMANDS.values():
            both = sides(executor, command)
            for kind in KINDS:
                side = both[kind]
                for _ in range(WARM_UP):
                    side()
                measured(functools.partial(repeat, side, calls))


def instructions(image: str, calls: int) -> dict[str, dict[str, int]]:
    """Instructions per check, each side and command, from one run under callgrind."""
    counts = iter(parts([__file__, "--image", image, "--measure", str(calls)], len(COMMANDS) * len(KINDS)))
    return {command: {kind: round(next(counts) / calls) for kind in KINDS} for command in COMMANDS}


def pairs(executor: SandboxExecutor, command: list[str], count: int) -> dict[str, Any]:
    """Wall time, alternating, and requests per check, each side."""
    both = sides(executor, command)
    for _ in range(WARM_UP):
        both["raw"]()
        both["run_check"]()
    requests: dict[str, Any] = {}
    for kind, side in both.items():
        with counting() as seen:
            side()
        requests[kind] = {"total": seen.total, "by_path": dict(sorted(seen.by_path.items()))}
    times: dict[str, list[float]] = {kind: [] for kind in KINDS}
    for n in range(count):
        order = KINDS if n % 2 == 0 else KINDS[::-1]
        for kind in order:
            started = time.perf_counter()
            both[kind]()
            times[kind].append(time.perf_counter() - started)
    return {
        "requests_per_check": requests,
        "raw_median_ms": round(statistics.median(times["raw"]) * 1000, 2),
        "run_check_median_ms": round(statistics.median(times["run_check"]) * 1000, 2),
        "run_check / raw, wall": round(statistics.median(h / r for h, r in zip(times["run_check"], times["raw"], strict=True)), 3),
        "pairs": count,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pairs", type=int, default=30)
    parser.add_argument("--calls", type=int, default=10)
    parser.add_argument("--image", default=os.environ.get("HARNESS_SANDBOX_IMAGE", "harness-sandbox:latest"))
    parser.add_argument("--no-callgrind", action="store_true", help="wall time and requests only")
    parser.add_argument("--json", action="store_true", help="JSON (what it always prints), as run_all asks every benchmark")
    parser.add_argument("--measure", type=int, metavar="N", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure:
        measure(args.image, args.measure)
        return
    result: dict[str, Any] = {}
    with sandbox(args.image) as executor:
        for name, command in COMMANDS.items():
            result[name] = pairs(executor, command, args.pairs)
    if not args.no_callgrind and available():
        for name, counts in instructions(args.image, args.calls).items():
            result[name]["instructions_per_check"] = counts
            result[name]["run_check / raw, instructions"] = round(counts["run_check"] / counts["raw"], 3)
    for found in result.values():
        requests = found["requests_per_check"]
        found["run_check / raw, requests"] = round(requests["run_check"]["total"] / requests["raw"]["total"], 3)
    result.update(image=args.image, machine=machine(), load=load(), at=now())
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
