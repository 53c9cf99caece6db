"""What a tool call costs as the repository grows, each figure next to its floor
measured in the same run on the same tree:

- read_file / write_file through the real Harness and SandboxExecutor (in-memory
  state, as bench/sandbox_overhead.py), against a raw ``stat`` + ``open`` + read of
  the same file / a raw write-and-rename;
- run_check of one trivial test through the Harness, against a raw ``docker exec``
  of the same command in the same container (interleaved);
- read_file and write_file through a run as the ``run_task`` command drives one
  (``--run-task N``: N of each, 30 by default; the lease, the gates, the container,
  each step's durable checkpoint on SQLite): each call's proposal to its receipt and
  its whole turn, from the run's events (``through_run``);
- preparing a run's workspace from a git repository and from a directory, against
  ``git clone --local`` / ``cp -a`` of the same tree (run start adds the first
  pickup, and the container starting meanwhile).

    python bench/repo_scale.py [--sizes 10,5000,20000,100000] [--huge] [--json] [--run-task N]
                               [--baseline DIR]

``--huge`` adds 300,000 files (about 1.5 GB of disk and several minutes; its
preparations are measured ``--huge-rounds`` times). Trees are generated in a
temporary directory and removed afterwards. Every figure is printed as a ratio to its
floor; run start is preparation from git, then a worker's first pickup as the
product runs it (``Workspace.picked_up``, a full walk unless the worker has just made
the workspace) with the container starting in the background, until both are done
(``pickup``; the pickup's own part, before the run's first step may be taken, is
``pickup_own``), against ``git clone --local``. Each run start is made in a fresh
process (``--start-once``), which also counts what it cost beside the time: the
processes it spawned, its own read system calls (the files it read), and its CPU
with its children's. ``--baseline DIR`` makes the same run start, in the same round,
with the code checked out at DIR (``git worktree add DIR main``, say): before and
after interleaved in one run, the order alternating by round. ``--dir /dev/shm``
makes the trees on a tmpfs, when a shared disk would measure the neighbours more than
the harness.

``--callgrind N`` counts instead of timing (nothing else is measured then): the
instructions of N write_file steps of a run on each size's tree, each step (proposal
to the next proposal) one part counted by valgrind's callgrind (bench/instructions.py),
the run made as ``--run-task`` makes it, without the container pool and with the kill
poll and the lease's renewal far apart, so that no thread of the worker lands in a
count by chance. ``--callgrind-part P`` counts each call of one part of those steps
instead (``checkpoint``, ``execute``, ``receipt``, ``write``, or any ``module:name``),
and the step's share of it; with ``--baseline DIR``, each version twice, interleaved:

    python bench/repo_scale.py --sizes 100000 --dir /dev/shm --callgrind 20 [--callgrind-part P] [--baseline DIR]"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
# --start-once / --run-task-once --code DIR: the product's modules are the ones checked out at DIR.
ONCE = "--start-once" in sys.argv or "--run-task-once" in sys.argv
CODE = Path(sys.argv[sys.argv.index("--code") + 1]).resolve() if ONCE and "--code" in sys.argv else ROOT
sys.path.insert(0, str(CODE))

from bench.sandbox_overhead import LIMITS, machine, raw_cli, step_times, summary  # noqa: E402
from core.contract import WorkspaceSource  # noqa: E402
from core.policy import CheckDef  # noqa: E402
from core.ports import Call  # noqa: E402
from core.simulated import MemoryArtifacts  # noqa: E402
from sandbox.container.client import shared_client  # noqa: E402
from sandbox.container.quota import DiskQuota  # noqa: E402
from sandbox.container.sandbox_container import SandboxContainer  # noqa: E402
from sandbox.container.spec import ContainerSpec  # noqa: E402
from sandbox.executor import SandboxExecutor  # noqa: E402
from sandbox.tools.context import MemoryOutbox, ToolSettings  # noqa: E402
from sandbox.workspace.preparation import prepare_workspace  # noqa: E402
from sandbox.workspace.run_workspace import RunWorkspace  # noqa: E402

TRIVIAL = CheckDef(
    check_id="trivial", command=["python3", "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/test_trivial.py"], timeout_seconds=120
)
FILES_PER_DIR = 100
GIT_ENV = {**os.environ, "GIT_AUTHOR_NAME": "b", "GIT_AUTHOR_EMAIL": "b@x", "GIT_COMMITTER_NAME": "b", "GIT_COMMITTER_EMAIL": "b@x"}


def generate(root: Path, files: int) -> None:
    """``files`` small Python files, 100 to a directory, three levels deep, plus one
    trivial test; committed to git and packed as a real repository would be."""
    (root / "tests").mkdir(parents=True)
    (root / "tests" / "test_trivial.py").write_text("def test_trivial():\n    assert True\n")
    (root / "src").mkdir()
    (root / "src" / "edited.py").write_text("VALUE = 0\n")
    for n in range(max(0, files - 2)):
        directory = root / "src" / f"p{n // 10_000}" / f"m{n // FILES_PER_DIR}"
        if n % FILES_PER_DIR == 0:
            directory.mkdir(parents=True, exist_ok=True)
        (directory / f"f{n}.py").write_text(f"N{n} = {n}\n")
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    subprocess.run(["git", "add", "-A"], cwd=root, check=True, env=GIT_ENV)
    # No automatic gc in the background: it would race the copies measured next.
    subprocess.run(["git", "-c", "gc.auto=0", "commit", "-qm", "tree"], cwd=root, check=True, env=GIT_ENV)
    subprocess.run(["git", "repack", "-adq"], cwd=root, check=True, env=GIT_ENV)
    subprocess.run(["git", "prune-packed"], cwd=root, check=True, env=GIT_ENV)


def timed(fn: Any, *args: Any) -> float:
    started = time.perf_counter()
    fn(*args)
    return time.perf_counter() - started


def command(argv: list[str]) -> None:
    subprocess.run(argv, check=True, env=GIT_ENV)


def drop(path: Path) -> None:
    # The harness's workspace is chowned to the sandbox uid; root removes it anyway.
    shutil.rmtree(path, ignore_errors=True)


def preparation(src: Path, tmp: Path, rounds: int, image: str, baseline: Path | None) -> dict[str, Any]:
    out: dict[str, list[float]] = {"cp_a": [], "git_clone_local": [], "git_clone_local_cpu": [], "prepare_path": []}
    starts: dict[str, list[dict[str, Any]]] = {"current": [], "baseline": []}
    for r in range(rounds):
        target = tmp / f"floor-{r}"
        out["cp_a"].append(timed(command, ["cp", "-a", str(src), str(target)]))
        drop(target)
        cpu = cpu_seconds()
        out["git_clone_local"].append(timed(command, ["git", "clone", "-q", "--local", str(src), str(target)]))
        out["git_clone_local_cpu"].append(cpu_seconds() - cpu)
        drop(target)
        run_root = tmp / f"ws-path-{r}"
        started = time.perf_counter()
        prepare_workspace(run_root, WorkspaceSource(kind="path", path=str(src)), tmp, (tmp,))
        out["prepare_path"].append(time.perf_counter() - started)
        drop(run_root)
        versions = [("current", ROOT)] + ([("baseline", baseline)] if baseline is not None else [])
        for name, code in versions if r % 2 == 0 else versions[::-1]:
            starts[name].append(start_elsewhere(code, src, tmp / f"ws-git-{name}-{r}", image, r))
    medians: dict[str, Any] = {key: statistics.median(values) * 1000 for key, values in out.items()}
    medians.update(start_medians(starts["current"]))
    medians["ratio_git_vs_clone"] = medians["prepare_git"] / medians["git_clone_local"]
    medians["ratio_path_vs_cp"] = medians["prepare_path"] / medians["cp_a"]
    if starts["baseline"]:
        medians["baseline"] = start_medians(starts["baseline"])
    medians["rounds"] = starts
    return medians


def start_medians(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """The medians of a version's run starts: times in ms, counts as they were."""
    return {key: statistics.median(r[key] for r in rounds) for key in rounds[0]}


def start_elsewhere(code: Path, src: Path, run_root: Path, image: str, r: int) -> dict[str, Any]:
    """One run start (preparation from git, then the pickup) with the code at ``code``,
    in a process of its own."""
    argv = [sys.executable, str(Path(__file__).resolve()), "--start-once", "--code", str(code), str(src), str(run_root), image, str(r)]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, check=True)
    finally:
        drop(run_root)
    found: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return found


def start_once(src: Path, run_root: Path, image: str, r: int) -> dict[str, Any]:
    """Preparation from git and the first pickup, as a worker makes them, with what they
    cost beside the time: processes spawned, this process's read system calls, CPU
    (its own and its children's)."""
    spawned: list[str] = []
    real_init = subprocess.Popen.__init__

    def counting(self: subprocess.Popen[Any], args: Any, *rest: Any, **options: Any) -> None:
        spawned.append(os.path.basename(str(args[0] if isinstance(args, (list, tuple)) else args)))
        real_init(self, args, *rest, **options)

    subprocess.Popen.__init__ = counting  # type: ignore[method-assign]  # counted in this one-shot process only
    tmp = run_root.parent
    reads, cpu = read_calls(), cpu_seconds()
    started = time.perf_counter()
    workspace = prepare_workspace(run_root, WorkspaceSource(kind="git", path=str(src)), tmp, (tmp,))
    prepared = time.perf_counter() - started
    reads_prepared, cpu_prepared, spawned_prepared = read_calls() - reads, cpu_seconds() - cpu, len(spawned)
    took, own = pickup(workspace, image, r)
    reads_pickup, cpu_pickup = read_calls() - reads - reads_prepared, cpu_seconds() - cpu - cpu_prepared
    # What the first check asks before it runs: the workspace's size for the quota
    # (recorded by the pickup's walk where there was one, else counted now).
    quota = timed(workspace.index.usage)
    return {
        "prepare_git": prepared * 1000,
        "pickup": took * 1000,
        "pickup_own": own * 1000,
        "run_start_ms": (prepared + took) * 1000,
        "run_start_to_first_step_ms": (prepared + own) * 1000,
        "first_quota_look_ms": quota * 1000,
        "processes_prepare": spawned_prepared,
        "processes_pickup": len(spawned) - spawned_prepared,
        "read_calls_prepare": reads_prepared,
        "read_calls_pickup": reads_pickup,
        "cpu_ms_prepare": cpu_prepared * 1000,
        "cpu_ms_pickup": cpu_pickup * 1000,
    }


def read_calls() -> int:
    """This process's read system calls so far, all its threads' (``syscr``)."""
    for line in Path("/proc/self/io").read_text().splitlines():
        if line.startswith("syscr:"):
            return int(line.split()[1])
    raise RuntimeError("/proc/self/io has no syscr")


def cpu_seconds() -> float:
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def pickup(workspace: RunWorkspace, image: str, r: int) -> tuple[float, float]:
    """A worker's first pickup as the product runs it: the container starts in the
    background (runs.runtime.sandbox_environment) while the pickup reads the
    workspace's revision (Harness.run: a full walk unless this process has just made
    the workspace). Returns (until both are done, the pickup's own part)."""
    spec = ContainerSpec.from_limits(LIMITS, image)
    executor = SandboxExecutor(
        f"bench-pickup-{r}",
        workspace,
        None,
        MemoryArtifacts(),
        MemoryOutbox(),
        ToolSettings(write_paths=("src/*",)),
        spec=spec,
        scope="bench",
    )
    # The code before Workspace.picked_up walked at every pickup (--baseline).
    picked_up = getattr(workspace, "picked_up", workspace.verify)
    try:
        started = time.perf_counter()
        executor.start_container()
        own = timed(picked_up)
        executor.wait_for_start()
        took = time.perf_counter() - started
        assert executor.container is not None, "the sandbox container did not start"
    finally:
        executor.close()
    return took, own


def raw_read(path: Path) -> float:
    started = time.perf_counter()
    os.stat(path)
    with open(path, "rb") as handle:
        handle.read()
    return time.perf_counter() - started


def raw_write(path: Path, n: int) -> float:
    started = time.perf_counter()
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(f"VALUE = {n}\n")
    os.replace(tmp, path)
    return time.perf_counter() - started


def calls(tree: Path, tmp: Path, image: str, reads: int, writes: int, checks: int) -> dict[str, Any]:
    workspace = prepare_workspace(tmp / "run", WorkspaceSource(kind="git", path=str(tree)), tmp, (tmp,))
    started = time.perf_counter()
    container = SandboxContainer.start("bench-scale", workspace.dir, ContainerSpec.from_limits(LIMITS, image), scope="bench")
    result: dict[str, Any] = {"container_start_ms": (time.perf_counter() - started) * 1000}
    try:
        # The policy's default quota (1 GB) is smaller than 300,000 small files' blocks.
        quota = DiskQuota(workspace_max_bytes=1 << 40)
        executor = SandboxExecutor(
            "bench-scale", workspace, container, MemoryArtifacts(), MemoryOutbox(), ToolSettings(write_paths=("src/*",), quota=quota)
        )
        read = {"tool": "read_file", "args": {"path": "src/edited.py"}}
        step_times(executor, read, 20)  # warm-up
        read_times = step_times(executor, read, reads)
        raw_reads = [raw_read(workspace.dir / "src" / "edited.py") for _ in range(reads)]

        def write(n: int) -> dict[str, Any]:
            return {"tool": "write_file", "args": {"path": "src/edited.py", "content": f"VALUE = {n + 1}\n"}}

        write_times = step_times(executor, write, writes, write_paths=("src/*",))
        raw_writes = [raw_write(tmp / "raw-write.py", n) for n in range(writes)]
        result["read_file"] = summary(read_times)
        result["raw_read"] = summary(raw_reads)
        result["write_file"] = summary(write_times)
        result["raw_write"] = summary(raw_writes)

        check = {"tool": "run_check", "args": {"check_id": TRIVIAL.check_id}}
        raw: list[float] = []
        raw_cli(container.id, list(TRIVIAL.command))  # warm-up
        probe = Call("bench-scale", "probe", "run_check", "1", {"check_id": TRIVIAL.check_id}, 1, None, 100_000, TRIVIAL)
        receipt: Any = executor.execute(probe)
        if receipt["data"].get("exit_code") != 0:  # refused or failed: say why instead of timing it
            result["run_check_error"] = str(receipt["data"].get("error") or receipt["data"].get("output"))[:300]
        else:
            check_times = step_times(
                executor, check, checks, before_each=lambda: raw.append(raw_cli(container.id, list(TRIVIAL.command))), check=TRIVIAL
            )
            result["run_check"] = summary(check_times)
            result["raw_exec"] = summary(raw)
            result["check_overhead_ms"] = statistics.median(h - r for h, r in zip(check_times, raw, strict=True)) * 1000
        assert workspace.verify() == workspace.revision()
    finally:
        container.remove()
        drop(tmp / "run")
    return result


def through_runs(tree: Path, tmp: Path, image: str, calls: int, baseline: Path | None) -> dict[str, Any]:
    """``through_run`` with this code and, given ``baseline``, with the code checked out
    there too, interleaved: two runs of each (this, baseline, baseline, this), their
    calls summarised together; the baseline's under ``baseline``."""
    versions = [("this", ROOT)] + ([("baseline", baseline)] if baseline is not None else [])
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name, _ in versions}
    for r in range(2 if baseline is not None else 1):
        for name, code in versions if r % 2 == 0 else versions[::-1]:
            runs[name].append(through_run(tree, tmp, image, calls, code))
    found = merged(runs["this"])
    if baseline is not None:
        found["baseline"] = merged(runs["baseline"])
    return found


def merged(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Several runs' figures as one: each figure summarised over all their calls."""
    found: dict[str, Any] = {key: [run[key] for run in runs] for key in ("outcome", "run_seconds", "run_cpu_seconds")}
    found["calls"] = runs[0]["calls"]
    for key in RUN_TASK_FIGURES:
        found[key] = summary([seconds for run in runs for seconds in run["samples"][key]])
    found["run_cpu_seconds"] = statistics.median(found["run_cpu_seconds"])
    return found


def through_run(tree: Path, tmp: Path, image: str, calls: int, code: Path = ROOT) -> dict[str, Any]:
    """read_file and write_file as a run makes them through the product's own path (the
    ``run_task`` command's: ``create_run``, then ``advance`` in this process: the
    worker's lease, the workspace prepared from git, its container, the gates, the
    executor, and each step's durable checkpoint on SQLite), in a process of its own
    (``--run-task-once``) with a database and workspaces of its own under ``tmp``. From
    the run's events: each call's proposal to its receipt (``proposed`` to
    ``receipt_recorded``, the times they were made), and its turn, proposal to the next
    proposal (the checkpoint that stores the receipt included)."""
    # Imported here, not above: a --code child imports the bench package of that checkout,
    # which may be older than this helper.
    from bench.machine import child_env

    var = tmp / "run-task"
    var.mkdir()
    env = child_env(
        var, HARNESS_WORKSPACE_SOURCES=str(tree.parent), HARNESS_SANDBOX_IMAGE=image, HARNESS_SANDBOX_SCOPE=f"bench-scale-{os.getpid()}"
    )
    argv = [sys.executable, str(Path(__file__).resolve()), "--run-task-once", "--code", str(code), str(tree), str(calls)]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, env=env, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"the run_task measurement failed: {done.stderr[-3000:]}")
    finally:
        drop(var)
    found: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return found


# What --callgrind-part names: the parts of a write's step, as "module:name".
PARTS = {
    "step": "core.loop:_step",
    "checkpoint": "runs.persistence.store:DjangoStore.checkpoint",
    "execute": "sandbox.executor:SandboxExecutor.execute",
    "receipt": "core.execution:_checked_receipt",
    "write": "sandbox.workspace.run_workspace:RunWorkspace.write_file",
}


# The writes before the counted ones: the first pays for what a run does once.
WARM_WRITES = 2


def counted_writes(tree: Path, tmp: Path, image: str, steps: int, part: str, code: Path = ROOT) -> list[int]:
    """The instructions of each call of ``part`` (``PARTS``) in ``steps`` write_file steps
    of a run made as ``through_run`` makes one (the first ``WARM_WRITES``, which pay for
    what a run does once, left out), by callgrind in a child of its own."""
    from bench.instructions import parts
    from bench.machine import child_env

    var = tmp / "run-task"
    var.mkdir()
    # No pool refilling in a thread, no kill poll every 0.25 s, no lease renewed meanwhile:
    # callgrind counts every thread, and theirs would land in whichever part was counted.
    env = child_env(
        var,
        HARNESS_WORKSPACE_SOURCES=str(tree.parent),
        HARNESS_SANDBOX_IMAGE=image,
        HARNESS_SANDBOX_SCOPE=f"bench-scale-{os.getpid()}",
        HARNESS_SANDBOX_POOL_SIZE="0",
        HARNESS_KILL_POLL_SECONDS="3600",
        HARNESS_LEASE_SECONDS="36000",
    )
    argv = [str(Path(__file__).resolve()), "--run-task-once", "--code", str(code), str(tree), "1", str(steps), part]
    try:
        # Migrated first, outside valgrind: minutes under it, and nothing of what is counted.
        subprocess.run([sys.executable, str(code / "manage.py"), "migrate", "--verbosity", "0"], env=env, check=True)
        return parts(argv, steps + 1 if part == "step" else None, env)[1:]  # the first: count_in_writes
    finally:
        drop(var)


def count_in_writes(writes_from: int, steps: int, part: str) -> None:
    """``counted_writes``' child: the step ``writes_from`` (the script's, one proposal
    each) whole, then each call of ``part`` in the ``steps`` steps after it, are the
    parts callgrind counts."""
    import importlib
    import itertools

    from bench.instructions import measured
    from core import loop

    module, _, name = PARTS.get(part, part).partition(":")
    *path, attr = name.split(".")
    owner: Any = importlib.import_module(module)
    for attribute in path:
        owner = getattr(owner, attribute)
    inner = getattr(owner, attr)
    numbers = itertools.count()
    inside = False

    def counted(*args: Any, **kwargs: Any) -> Any:
        return measured(lambda: inner(*args, **kwargs)) if inside else inner(*args, **kwargs)

    setattr(owner, attr, counted)
    step_fn = loop._step

    def step(*args: Any) -> Any:
        nonlocal inside
        number = next(numbers)
        if number == writes_from:
            # The first write's step callgrind counts came to some 24 M instructions
            # more than the next ones (at 2,000 and at 100,000 files, whatever the part):
            # not found why. It is counted whole, and left out.
            return measured(lambda: step_fn(*args))
        inside = writes_from < number <= writes_from + steps
        try:
            return step_fn(*args)
        finally:
            inside = False

    loop._step = step  # type: ignore[assignment]


def run_task_once(tree: Path, calls: int, counted: int = 0, part: str = "step") -> dict[str, Any]:
    """``through_run``'s child: one run of ``calls`` reads then ``calls`` writes; or,
    ``counted`` given, ``counted_writes``': ``calls`` reads, then ``WARM_WRITES`` writes
    and ``counted + 1`` more, counted (``count_in_writes``)."""
    import django

    django.setup()
    from django.core.management import call_command

    from runs.models import Event
    from runs.runtime import advance, create_run

    call_command("migrate", verbosity=0)
    script: list[dict[str, Any]] = [{"tool": "read_file", "args": {"path": "src/edited.py"}}] * calls
    writes = WARM_WRITES + 1 + counted if counted else calls
    script += [{"tool": "write_file", "args": {"path": "src/edited.py", "content": f"VALUE = {n + 1}\n"}} for n in range(writes)]
    if counted:
        count_in_writes(calls + WARM_WRITES, counted, part)
    limits = {"max_proposals": len(script) + 5, "max_tool_calls": len(script) + 5, "max_attempts": 1, "wall_time_seconds": 3600}
    contract = {
        "task_id": "bench-scale",
        "objective": "read and write at scale",
        "acceptance_criteria": ["measured"],
        "workspace": {"kind": "git", "path": str(tree)},
        "allowed_write_paths": ["src/*"],
        "allowed_tools": ["read_file", "write_file"],
        "verification_targets": ["tests"],
        "limits": {**limits, "max_output_bytes_per_call": 200_000},
    }
    run = create_run(contract, {"kind": "scripted", "script": script}, None, enqueue=False)
    started, cpu = time.perf_counter(), time.process_time()
    outcome = advance(str(run.pk))
    seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
    if counted:
        return {"outcome": outcome}
    rows = list(
        Event.objects.filter(run=run, type__in=("proposed", "receipt_recorded")).order_by("seq").values_list("type", "call_id", "ts")
    )
    proposed = [(call_id, ts.timestamp()) for kind, call_id, ts in rows if kind == "proposed"]
    receipts = {call_id: ts.timestamp() for kind, call_id, ts in rows if kind == "receipt_recorded"}
    tools = [step["tool"] for step in script]
    # The run's CPU (this process, all its threads), its preparation at this size included.
    result: dict[str, Any] = {"outcome": outcome, "run_seconds": seconds, "run_cpu_seconds": cpu, "calls": calls, "samples": {}}
    for tool in ("read_file", "write_file"):
        # The first of each kind is left out: it pays for what the run does once
        # (the container's start, the quota's first look).
        mine = [(n, call_id, ts) for n, (call_id, ts) in enumerate(proposed) if n < len(tools) and tools[n] == tool][1:]
        to_receipt = [receipts[call_id] - ts for _, call_id, ts in mine if call_id in receipts]
        turns = [proposed[n + 1][1] - ts for n, _, ts in mine if n + 1 < len(proposed)]
        if len(to_receipt) != len(mine) or not turns:
            raise RuntimeError(f"the run ended {outcome} before its {tool} calls were all made")
        result["samples"].update({f"{tool}_to_receipt": to_receipt, f"{tool}_turn": turns})
    return result


def uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True, check=False).stdout.strip()


def measure(
    sizes: list[int],
    image: str,
    rounds: dict[int, int],
    counts: tuple[int, int, int],
    where: str | None,
    baseline: Path | None = None,
    run_task_calls: int = 0,
) -> dict[str, Any]:
    rows: dict[str, Any] = {}
    for size in sizes:
        with tempfile.TemporaryDirectory(prefix="harness-scale-", dir=where) as name:
            tmp = Path(name)
            tree = tmp / "repo"
            began = time.perf_counter()
            generate(tree, size)
            generated = time.perf_counter() - began
            row: dict[str, Any] = {"files": size, "generate_s": generated, "load_before": uptime()}
            row["preparation"] = preparation(tree, tmp, rounds[size], image, baseline)
            row.update(calls(tree, tmp, image, *counts))
            if run_task_calls:
                row["through_run_task"] = through_runs(tree, tmp, image, run_task_calls, baseline)
            # Run start: preparation from git, then the pickup, the container starting meanwhile (medians of whole starts).
            row["run_start_ms"] = row["preparation"]["run_start_ms"]
            row["load_after"] = uptime()
            rows[str(size)] = row
            # Each size as it is measured: a long run interrupted keeps what it had.
            print(json.dumps(row), file=sys.stderr, flush=True)
    return {
        "rows": rows,
        "machine": machine(),
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "dir": where or tempfile.gettempdir(),
    }


def ratio(value: float, floor: float) -> str:
    return f"{value / floor:.1f}x" if floor > 0 else "-"


def table(result: dict[str, Any]) -> str:
    lines = [
        "| files | read_file / raw read | write_file / raw write | run_check / raw exec (overhead) "
        "| run start / `git clone --local` | prepare from git / `git clone --local` | prepare from a path / `cp -a` |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for row in result["rows"].values():
        p = row["preparation"]
        read, raw_read_ms = row["read_file"]["median_ms"], row["raw_read"]["median_ms"]
        write, raw_write_ms = row["write_file"]["median_ms"], row["raw_write"]["median_ms"]
        if "run_check" in row:
            checked, raw_exec = row["run_check"]["median_ms"], row["raw_exec"]["median_ms"]
            check = f"{checked:.0f} / {raw_exec:.0f} ms = {checked / raw_exec:.2f}x ({row['check_overhead_ms']:+.0f} ms)"
        else:
            check = f"not run: {row.get('run_check_error', '?')[:80]}"
        start = row["run_start_ms"]
        lines.append(
            f"| {row['files']:,} "
            f"| {read:.2f} / {raw_read_ms:.3f} ms = {ratio(read, raw_read_ms)} "
            f"| {write:.2f} / {raw_write_ms:.3f} ms = {ratio(write, raw_write_ms)} "
            f"| {check} "
            f"| {start:.0f} / {p['git_clone_local']:.0f} ms = {start / p['git_clone_local']:.2f}x "
            f"| {p['prepare_git']:.0f} / {p['git_clone_local']:.0f} ms = {p['ratio_git_vs_clone']:.2f}x "
            f"| {p['prepare_path']:.0f} / {p['cp_a']:.0f} ms = {p['ratio_path_vs_cp']:.2f}x |"
        )
    return "\n".join(lines)


def starts_table(result: dict[str, Any]) -> str:
    """Run start in detail, each version's medians: to the first step (preparation and
    the pickup's own part) and until the container is up too, with the counts beside."""
    lines = [
        "| files | code | run start / clone | to the first step / clone | preparation / clone | pickup's own part "
        "| first quota look | processes (prepare + pickup) | read calls (prepare + pickup) | CPU ms (prepare + pickup) / clone's |",
        "| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for row in result["rows"].values():
        p = row["preparation"]
        clone = p["git_clone_local"]
        for name, found in [("this", p)] + ([("baseline", p["baseline"])] if "baseline" in p else []):
            lines.append(
                f"| {row['files']:,} | {name} "
                f"| {found['run_start_ms']:.0f} / {clone:.0f} ms = {found['run_start_ms'] / clone:.2f}x "
                f"| {found['run_start_to_first_step_ms'] / clone:.2f}x "
                f"| {found['prepare_git'] / clone:.2f}x "
                f"| {found['pickup_own']:.0f} ms "
                f"| {found['first_quota_look_ms']:.0f} ms "
                f"| {found['processes_prepare']:.0f} + {found['processes_pickup']:.0f} "
                f"| {found['read_calls_prepare']:,.0f} + {found['read_calls_pickup']:,.0f} "
                f"| {found['cpu_ms_prepare']:.0f} + {found['cpu_ms_pickup']:.0f} / {p['git_clone_local_cpu']:.0f} |"
            )
    return "\n".join(lines)


def run_task_table(result: dict[str, Any]) -> str:
    """read_file and write_file through a run (``through_run``): medians (p90) in ms."""
    lines = [
        "| files | code | read_file, proposal to receipt | its turn | write_file, proposal to receipt | its turn | run's CPU |",
        "| ---: | --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for row in result["rows"].values():
        found = row.get("through_run_task")
        if found is None:
            continue
        for name, figures in [("this", found)] + ([("baseline", found["baseline"])] if "baseline" in found else []):
            cells = [f"{figures[key]['median_ms']:.1f} ({figures[key]['p90_ms']:.1f})" for key in RUN_TASK_FIGURES]
            lines.append(f"| {row['files']:,} | {name} | {' | '.join(cells)} | {figures['run_cpu_seconds']:.2f} s |")
    return "\n".join(lines)


def counts(sizes: list[int], image: str, where: str | None, steps: int, part: str, baseline: Path | None) -> dict[str, Any]:
    """``counted_writes`` on each size's tree; with ``baseline``, each version twice, interleaved."""
    versions = [("this", ROOT)] + ([("baseline", baseline)] if baseline is not None else [])
    rows: dict[str, Any] = {}
    for size in sizes:
        with tempfile.TemporaryDirectory(prefix="harness-scale-", dir=where) as name:
            tmp = Path(name)
            generate(tmp / "repo", size)
            row: dict[str, Any] = {"files": size, "load_before": uptime(), "runs": []}
            for r in range(2 if baseline is not None else 1):
                for version, code in versions if r % 2 == 0 else versions[::-1]:
                    found = counted_writes(tmp / "repo", tmp, image, steps, part, code)
                    row["runs"].append({"version": version, "counts": found})
                    print(json.dumps({"files": size, **row["runs"][-1]}), file=sys.stderr, flush=True)
            row["load_after"] = uptime()
            rows[str(size)] = row
    return {"rows": rows, "steps": steps, "part": part, "machine": machine(), "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")}


def counts_table(result: dict[str, Any]) -> str:
    """Each run's counts: the median call of the part (min, max), its calls per step and
    the median step's instructions in it (a step's calls are consecutive parts)."""
    steps, part = result["steps"], result["part"]
    lines = [
        f"Instructions of {part} in {steps} write_file steps of a run ({result['machine']}, {result['date']})",
        "",
        "| files | code | per call, median (min-max) | calls per step | per step, median |",
        "| ---: | --- | ---: | ---: | ---: |",
    ]
    for row in result["rows"].values():
        for run in row["runs"]:
            found = run["counts"]
            each = len(found) // steps
            per_step = [sum(found[n : n + each]) for n in range(0, each * steps, each)] if each else [0]
            lines.append(
                f"| {row['files']:,} | {run['version']} | {statistics.median(found):,.0f} ({min(found):,}-{max(found):,}) "
                f"| {len(found) / steps:.2f} | {statistics.median(per_step):,.0f} |"
            )
        lines.append(f"\n{row['files']:,} files: load before {row['load_before']!r}, after {row['load_after']!r}")
    return "\n".join(lines)


RUN_TASK_FIGURES = ("read_file_to_receipt", "read_file_turn", "write_file_to_receipt", "write_file_turn")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="10,5000,20000,100000")
    parser.add_argument("--huge", action="store_true", help="add 300,000 files")
    parser.add_argument("--rounds", type=int, default=3, help="preparations per size (median)")
    parser.add_argument("--huge-rounds", type=int, default=1, help="preparations of the 300,000-file tree")
    parser.add_argument("--calls", default="200,200,5", help="read_file, write_file and run_check steps per size")
    parser.add_argument(
        "--dir", default=None, help="where the trees are made (default: the system's temporary directory); e.g. /dev/shm for a tmpfs"
    )
    parser.add_argument("--image", default=os.environ.get("HARNESS_SANDBOX_IMAGE", "harness-sandbox:latest"))
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--baseline", type=Path, default=None, help="also the run starts of the code checked out at this directory")
    parser.add_argument(
        "--run-task", type=int, default=30, metavar="N", help="N reads and N writes through a run (run_task's path) per size; 0: none"
    )
    parser.add_argument("--callgrind", type=int, default=0, metavar="N", help="count the instructions of N write steps of a run instead")
    parser.add_argument("--callgrind-part", default="step", metavar="P", help=f"what --callgrind counts: {', '.join(PARTS)} or module:name")
    if "--run-task-once" in sys.argv:  # a child: --run-task-once --code DIR TREE CALLS [COUNTED PART]
        tree, count, *counting = sys.argv[sys.argv.index("--code") + 2 :]
        counted, part = (int(counting[0]), counting[1]) if counting else (0, "step")
        print(json.dumps(run_task_once(Path(tree), int(count), counted, part)))
        return
    if "--start-once" in sys.argv:  # a child of start_elsewhere: --start-once --code DIR SRC RUN_ROOT IMAGE ROUND
        src, run_root, image, r = sys.argv[sys.argv.index("--code") + 2 :]
        print(json.dumps(start_once(Path(src), Path(run_root), image, int(r))))
        return
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",") if s] + ([300_000] if args.huge else [])
    shared_client().ping()
    if args.callgrind:
        print(counts_table(counts(sizes, args.image, args.dir, args.callgrind, args.callgrind_part, args.baseline)))
        return
    reads, writes, checks = (int(n) for n in args.calls.split(","))
    rounds = {size: args.huge_rounds if size >= 300_000 else args.rounds for size in sizes}
    result = measure(sizes, args.image, rounds, (reads, writes, checks), args.dir, args.baseline, args.run_task)
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print(f"Repository scale on {result['machine']} ({result['date']}, trees in {result['dir']})\n")
    print(table(result))
    print()
    print(starts_table(result))
    print()
    print(run_task_table(result))
    for row in result["rows"].values():
        print(f"\n{row['files']:,} files: load before {row['load_before']!r}, after {row['load_after']!r}")


if __name__ == "__main__":
    main()
