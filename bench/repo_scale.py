"""What a tool call costs as the repository grows, each figure next to its floor
measured in the same run on the same tree:

- read_file / write_file through the real Harness and SandboxExecutor (in-memory
  state, as bench/sandbox_overhead.py), against a raw ``stat`` + ``open`` + read of
  the same file / a raw write-and-rename;
- run_check of one trivial test through the Harness, against a raw ``docker exec``
  of the same command in the same container (interleaved);
- preparing a run's workspace from a git repository and from a directory, against
  ``git clone --local`` / ``cp -a`` of the same tree (run start adds the first
  pickup: its walk, and the container starting meanwhile).

    python bench/repo_scale.py [--sizes 10,5000,20000,100000] [--huge] [--json]

``--huge`` adds 300,000 files (about 1.5 GB of disk and several minutes; its
preparations are measured ``--huge-rounds`` times). Trees are generated in a
temporary directory and removed afterwards. Every figure is printed as a ratio to its
floor; run start is preparation from git, then a worker's first pickup as the
product runs it: the container starting in the background while the full walk
verifies the workspace, until both are done (``pickup``; the walk alone is
``pickup_walk``), against ``git clone --local``. ``--dir /dev/shm`` makes the
trees on a tmpfs, when a shared disk would measure the neighbours more than the
harness."""

from __future__ import annotations

import argparse
import json
import os
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
sys.path.insert(0, str(ROOT))

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


def preparation(src: Path, tmp: Path, rounds: int, image: str) -> dict[str, Any]:
    out: dict[str, list[float]] = {
        "cp_a": [],
        "git_clone_local": [],
        "prepare_path": [],
        "prepare_git": [],
        "pickup_walk": [],
        "pickup": [],
    }
    for r in range(rounds):
        target = tmp / f"floor-{r}"
        out["cp_a"].append(timed(command, ["cp", "-a", str(src), str(target)]))
        drop(target)
        out["git_clone_local"].append(timed(command, ["git", "clone", "-q", "--local", str(src), str(target)]))
        drop(target)
        for kind in ("path", "git"):
            run_root = tmp / f"ws-{kind}-{r}"
            source = WorkspaceSource(kind=kind, path=str(src))
            started = time.perf_counter()
            workspace = prepare_workspace(run_root, source, tmp, (tmp,))
            out[f"prepare_{kind}"].append(time.perf_counter() - started)
            if kind == "git":
                took, walk = pickup(workspace, tmp, image, r)
                out["pickup"].append(took)
                out["pickup_walk"].append(walk)
            drop(run_root)
    medians = {key: statistics.median(values) * 1000 for key, values in out.items()}
    medians["ratio_git_vs_clone"] = medians["prepare_git"] / medians["git_clone_local"]
    medians["ratio_path_vs_cp"] = medians["prepare_path"] / medians["cp_a"]
    return medians


def pickup(workspace: RunWorkspace, tmp: Path, image: str, r: int) -> tuple[float, float]:
    """A worker's first pickup as the product runs it: the container starts in the
    background (runs.runtime.sandbox_environment) while the full walk verifies the
    workspace (Harness.run). Returns (until both are done, the walk alone)."""
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
    try:
        started = time.perf_counter()
        executor.start_container()
        walk = timed(workspace.verify)
        executor.wait_for_start()
        took = time.perf_counter() - started
        assert executor.container is not None, "the sandbox container did not start"
    finally:
        executor.close()
    return took, walk


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


def uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True, check=False).stdout.strip()


def measure(sizes: list[int], image: str, rounds: dict[int, int], counts: tuple[int, int, int], where: str | None) -> dict[str, Any]:
    rows: dict[str, Any] = {}
    for size in sizes:
        with tempfile.TemporaryDirectory(prefix="harness-scale-", dir=where) as name:
            tmp = Path(name)
            tree = tmp / "repo"
            began = time.perf_counter()
            generate(tree, size)
            generated = time.perf_counter() - began
            row: dict[str, Any] = {"files": size, "generate_s": generated, "load_before": uptime()}
            row["preparation"] = preparation(tree, tmp, rounds[size], image)
            row.update(calls(tree, tmp, image, *counts))
            # Run start: preparation from git, then the pickup (its verifying walk, the container starting meanwhile).
            row["run_start_ms"] = row["preparation"]["prepare_git"] + row["preparation"]["pickup"]
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
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",") if s] + ([300_000] if args.huge else [])
    shared_client().ping()
    reads, writes, checks = (int(n) for n in args.calls.split(","))
    rounds = {size: args.huge_rounds if size >= 300_000 else args.rounds for size in sizes}
    result = measure(sizes, args.image, rounds, (reads, writes, checks), args.dir)
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print(f"Repository scale on {result['machine']} ({result['date']}, trees in {result['dir']})\n")
    print(table(result))
    for row in result["rows"].values():
        print(f"\n{row['files']:,} files: load before {row['load_before']!r}, after {row['load_after']!r}")


if __name__ == "__main__":
    main()
