"""Time to first command: from a run asking for its container to the result of its
first command there, a `python3 -c pass` run_check through the executor (the tool as
the harness runs it: the quota's look, the wrapper, the output stored, the receipt),
with the container pool (sandbox/container/pool.py) and without it:

- **wall time**, pooled and cold alternating (pooled, cold, cold, pooled, ...), each
  start a new run with its own prepared workspace (prepared before the clock starts);
  the pool is warm (full) before each pooled start, as a worker's is between runs;
  median and p95 of each side, and the median of the per-pair ratios;
- **a second command** in the same container after each first one, once the pool is
  full again (the pool refills after a take's first command; its container start
  under the floor would make the floor the slower of the two): the floor under the
  same load, so the first command's excess over it is the start's own, given per
  pair as added milliseconds and as a ratio (the medians of each side's pairs);
- **requests to the engine** per start up to the first result, counted at the
  transport in the thread that starts the run (bench/engine_requests.py), the figure
  the machine's load does not change; beside it, what the pool's background thread
  sends to replace the container taken (off the run's path).

Each runtime the engine has (runc; runsc, gVisor, if registered) is measured.
``--baseline DIR`` measures the code checked out at DIR too (``git worktree add DIR
main``, say), before and after interleaved in one run: ``--rounds`` rounds, each a
process of each version in turn (the order alternating by round) measuring its share
of the pairs with this benchmark's own code; the figures are of all of a version's
pairs together.

    python bench/first_command.py [--pairs N] [--runtimes runc,runsc] [--json]
                                  [--baseline DIR [--rounds R]]"""

from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

ROOT = Path(__file__).resolve().parent.parent
# --child --code DIR: the product's modules are the ones checked out at DIR.
CODE = Path(sys.argv[sys.argv.index("--code") + 1]).resolve() if "--child" in sys.argv else ROOT
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(CODE))

from machine import load, machine, now  # noqa: E402

from bench.engine_requests import counting  # noqa: E402
from core.contract import WorkspaceSource  # noqa: E402
from core.policy import CheckDef, SandboxLimits  # noqa: E402
from core.ports import Call  # noqa: E402
from core.simulated import MemoryArtifacts  # noqa: E402
from sandbox.container import pool as container_pool  # noqa: E402
from sandbox.container.client import new_client  # noqa: E402
from sandbox.container.orphans import sweep_orphans  # noqa: E402
from sandbox.container.sandbox_container import SandboxContainer  # noqa: E402
from sandbox.container.spec import ContainerSpec  # noqa: E402
from sandbox.executor import SandboxExecutor  # noqa: E402
from sandbox.tools.context import MemoryOutbox, ToolSettings  # noqa: E402
from sandbox.workspace.preparation import prepare_workspace  # noqa: E402
from sandbox.workspace.run_workspace import RunWorkspace  # noqa: E402

SCOPE = f"bench-first-{os.getpid()}"
POOL_SIZE = 2
CHECK = CheckDef(check_id="first", command=["python3", "-c", "pass"], timeout_seconds=60)
SIDES = ("pooled", "cold")
FILL_SECONDS = 300
T = TypeVar("T")


def workspace(tmp: Path) -> tuple[str, RunWorkspace]:
    run_id = str(uuid.uuid4())
    return run_id, prepare_workspace(tmp / run_id, WorkspaceSource(kind="path", path="examples/orders"), ROOT, (ROOT,))


def first_command(run_id: str, prepared: RunWorkspace, spec: ContainerSpec, pooled: bool) -> SandboxExecutor:
    """The run's container, then its first command's result: the timed span."""
    container = SandboxContainer.start(run_id, prepared.dir, spec, scope=SCOPE, pooled=pooled)
    executor = SandboxExecutor(run_id, prepared, container, MemoryArtifacts(), MemoryOutbox(), ToolSettings(write_paths=()))
    command(executor, "c1")
    return executor


def command(executor: SandboxExecutor, call_id: str) -> None:
    call = Call(executor.run_id, call_id, "run_check", "1", {"check_id": "first"}, 1, None, 1_000_000, check=CHECK)
    result = executor.execute(call)
    assert isinstance(result, dict) and result["status"] == "ok", result


def warm(pool: container_pool.ContainerPool, spec: ContainerSpec) -> list[str]:
    until = time.monotonic() + FILL_SECONDS
    while len(pool.idle(SCOPE, spec)) < POOL_SIZE:
        if time.monotonic() > until:
            raise SystemExit(f"the pool did not fill for {spec.runtime} in {FILL_SECONDS} s")
        time.sleep(0.02)
    return [slot.container_id for slot in pool.idle(SCOPE, spec)]


def one(tmp: Path, spec: ContainerSpec, side: str, pool: container_pool.ContainerPool) -> tuple[float, float, dict[str, int]]:
    """One start of ``side``: seconds to the first result, then to a second command's
    in the same container once the pool is full again (the floor under the same
    load), and the requests the first sent."""
    run_id, prepared = workspace(tmp)
    idle = warm(pool, spec) if side == "pooled" else []
    with counting(this_thread=True) as seen:
        started = time.perf_counter()
        executor = first_command(run_id, prepared, spec, side == "pooled")
        elapsed = time.perf_counter() - started
    warm(pool, spec)
    started = time.perf_counter()
    command(executor, "c2")
    second = time.perf_counter() - started
    assert executor.container is not None
    assert (executor.container.id in idle) == (side == "pooled"), f"a {side} start, yet the container was {'not ' if idle else ''}pooled"
    executor.close()
    return elapsed, second, dict(sorted(seen.by_path.items()))


def refill_requests(tmp: Path, spec: ContainerSpec, pool: container_pool.ContainerPool) -> dict[str, int]:
    """What the pool's thread sends to replace one container taken."""
    run_id, prepared = workspace(tmp)
    warm(pool, spec)
    with counting() as everything, counting(this_thread=True) as mine:
        container = SandboxContainer.start(run_id, prepared.dir, spec, scope=SCOPE)
        warm(pool, spec)
    container.remove()
    background = everything.by_path - mine.by_path
    return dict(sorted(background.items()))


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


def sample(tmp: Path, spec: ContainerSpec, count: int, pool: container_pool.ContainerPool) -> dict[str, Any]:
    """``count`` pairs, after one start of each side (the engine's and the image's
    pages warm): each side's seconds to the first result, its floor's, and the
    requests (the same in every start)."""
    pool.want(SCOPE, spec)
    for side in SIDES:
        one(tmp, spec, side, pool)
    times: dict[str, list[float]] = {side: [] for side in SIDES}
    floors: dict[str, list[float]] = {side: [] for side in SIDES}
    requests: dict[str, dict[str, int]] = {}
    for n in range(count):
        for side in SIDES if n % 2 == 0 else SIDES[::-1]:
            seconds, second, seen = one(tmp, spec, side, pool)
            times[side].append(seconds)
            floors[side].append(second)
            requests.setdefault(side, seen)
            assert seen == requests[side], f"{side}: requests changed from {requests[side]} to {seen}"
    return {"times": times, "floors": floors, "requests": requests}


def summary(raw: dict[str, Any]) -> dict[str, Any]:
    times, floors, requests = raw["times"], raw["floors"], raw["requests"]
    found: dict[str, Any] = {}
    for side in SIDES:
        found[f"{side}_median_ms"] = round(statistics.median(times[side]) * 1000, 1)
        found[f"{side}_p95_ms"] = round(percentile(times[side], 0.95) * 1000, 1)
    found["pooled / cold, wall"] = round(statistics.median(p / c for p, c in zip(times["pooled"], times["cold"], strict=True)), 3)
    # A command in a container already running, measured after each first one: what
    # the first command costs beyond it is the start's own.
    found["second_command_median_ms"] = round(statistics.median(floors["pooled"] + floors["cold"]) * 1000, 1)
    for side in SIDES:
        pairs = list(zip(times[side], floors[side], strict=True))
        found[f"{side} added over the floor, ms"] = round(statistics.median(first - floor for first, floor in pairs) * 1000, 1)
        found[f"{side} first / second command, wall"] = round(statistics.median(first / floor for first, floor in pairs), 3)
    found["requests_per_start"] = {side: {"total": sum(seen.values()), "by_path": seen} for side, seen in requests.items()}
    found["pairs"] = len(times["pooled"])
    return found


def measure(runtime: str, image: str, count: int, tmp: Path, pool: container_pool.ContainerPool) -> dict[str, Any]:
    spec = ContainerSpec.from_limits(SandboxLimits(runtime=runtime), image)
    found = summary(sample(tmp, spec, count, pool))
    background = refill_requests(tmp, spec, pool)
    found["pool_refill_requests_per_container"] = {"total": sum(background.values()), "by_path": background}
    return found


def pooled(fn: Callable[[Path, container_pool.ContainerPool], T]) -> T:
    """``fn`` with this process's pool (a worker's, runs.apps), its slot directories
    beside the workspaces (the same filesystem), drained afterwards."""
    with tempfile.TemporaryDirectory(prefix="harness-bench-first-") as tmp:
        container_pool.configure(lambda: Path(tmp), lambda: POOL_SIZE)
        pool = container_pool.current()
        assert pool is not None
        try:
            return fn(Path(tmp), pool)
        finally:
            container_pool.drain()
            sweep_orphans([], scope=SCOPE)


def interleaved(runtime: str, image: str, count: int, rounds: int, baseline: Path) -> dict[str, Any]:
    """This code's pairs and ``baseline``'s, in alternating processes (``--child``)."""
    raw: dict[str, dict[str, Any]] = {}
    versions = [("this", ROOT), ("baseline", baseline)]
    for r in range(rounds):
        share = count // rounds + (1 if r < count % rounds else 0)
        for name, code in versions if r % 2 == 0 else versions[::-1]:
            argv = [sys.executable, str(Path(__file__).resolve()), "--child", "--code", str(code), runtime, image, str(share)]
            found = json.loads(subprocess.run(argv, capture_output=True, text=True, check=True).stdout)
            mine = raw.setdefault(name, {"times": {side: [] for side in SIDES}, "floors": {side: [] for side in SIDES}})
            for key in ("times", "floors"):
                for side in SIDES:
                    mine[key][side] += found[key][side]
            mine.setdefault("requests", found["requests"])
            assert found["requests"] == mine["requests"], f"{name}: requests changed from {mine['requests']} to {found['requests']}"
    return {name: summary(found) for name, found in raw.items()}


def main() -> None:
    if "--child" in sys.argv:  # a process of interleaved: --child --code DIR RUNTIME IMAGE PAIRS
        runtime, image, count = sys.argv[sys.argv.index("--code") + 2 :]
        spec = ContainerSpec.from_limits(SandboxLimits(runtime=runtime), image)
        print(json.dumps(pooled(lambda tmp, pool: sample(tmp, spec, int(count), pool))))
        return
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pairs", type=int, default=20)
    parser.add_argument("--runtimes", default="runc,runsc", help="those the engine has are measured")
    parser.add_argument("--image", default=os.environ.get("HARNESS_SANDBOX_IMAGE", "harness-sandbox:latest"))
    parser.add_argument("--json", action="store_true", help="JSON (what it always prints), as run_all asks every benchmark")
    parser.add_argument("--baseline", type=Path, default=None, help="also the code checked out at this directory, interleaved")
    parser.add_argument("--rounds", type=int, default=4, help="with --baseline: processes of each version, alternating")
    args = parser.parse_args()
    registered = new_client().info().get("Runtimes") or {}
    result: dict[str, Any] = {}
    for runtime in args.runtimes.split(","):
        if runtime not in registered:
            continue
        if args.baseline is not None:
            result[runtime] = interleaved(runtime, args.image, args.pairs, args.rounds, args.baseline.resolve())
        else:
            result[runtime] = pooled(functools.partial(measure, runtime, args.image, args.pairs))
    result.update(image=args.image, machine=machine(), load=load(), at=now())
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
