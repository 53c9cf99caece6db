"""What moving a run to another worker host costs (issue 28):

- rebuilding its workspace (``sandbox/rebuild.py``: the source at its commit, the
  recorded writes replayed and checked one by one, the whole tree walked and verified)
  against a plain ``git clone --local`` of the same repository, for the example
  workspace (examples/orders, as a git repository) and generated repositories of
  10,000 files (and 100,000 with ``--huge``);
- with ``--takeover``, the time from SIGKILL of host A's worker to host B's verified
  rebuild, from tests/test_host_takeover.py (real Celery workers, engines, PostgreSQL;
  its lease is 4 s), read back from the figures that test writes.

    python bench/rebuild_cost.py [--writes 20] [--rounds 5] [--example-only] [--huge] [--dir /dev/shm] [--takeover] [--json]

Beside the times, what the load changes little: the CPU (this process and its
children), this process's read system calls, and the processes this process started
(counted by an audit hook on ``subprocess.Popen``; git's own, such as the
``git-upload-pack`` each local clone starts, are not counted, on either side).

Trees are made in a temporary directory and removed afterwards. Needs no Docker and
no database for the rebuild figures."""

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
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.repo_scale import GIT_ENV, cpu_seconds, generate, read_calls  # noqa: E402
from core.contract import WorkspaceSource  # noqa: E402
from sandbox.rebuild import RecordedWrite, rebuild_workspace  # noqa: E402
from sandbox.workspace.preparation import prepare_workspace  # noqa: E402

PG_URL = "postgres://postgres@127.0.0.1:5432/harness_bench_takeover"
STARTED: list[str] = []  # the processes this process started, by name


def _count_processes(event: str, args: tuple[Any, ...]) -> None:
    if event == "subprocess.Popen":
        STARTED.append(str(args[1][0]))


def example_repository(root: Path) -> None:
    shutil.copytree(ROOT / "examples/orders", root, ignore=shutil.ignore_patterns("__pycache__", ".pytest_cache"))
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    subprocess.run(["git", "add", "-A"], cwd=root, check=True, env=GIT_ENV)
    subprocess.run(["git", "-c", "gc.auto=0", "commit", "-qm", "orders"], cwd=root, check=True, env=GIT_ENV)


def driven(src: Path, tmp: Path, writes: int) -> tuple[str, str, str, list[RecordedWrite]]:
    """A run's record: the commit it was prepared at, its base revision, its revision,
    and ``writes`` writes (each a new file, the last a rewrite of one), made on "host A"
    through the workspace's writers."""
    workspace = prepare_workspace(tmp / "host-a", WorkspaceSource(kind="git", path=str(src)), tmp, (tmp,))
    base = workspace.revision()
    recorded = []
    for n in range(writes):
        path, content = (f"notes/n{n}.txt", f"note {n}\n") if n < writes - 1 else ("notes/n0.txt", "rewritten\n")
        workspace.write_file(path, content)
        recorded.append(RecordedWrite(n + 1, f"c{n + 1}", "write_file", {"path": path, "content": content}, workspace.revision()))
    revision, commit = workspace.revision(), str(workspace.source["commit"])
    shutil.rmtree(tmp / "host-a", ignore_errors=True)
    return commit, base, revision, recorded


def measure(src: Path, tmp: Path, writes: int, rounds: int) -> dict[str, Any]:
    commit, base, revision, recorded = driven(src, tmp, writes)
    source = WorkspaceSource(kind="git", path=str(src))
    clone, rebuild, clone_cpu, rebuild_cpu, reads, started_processes = [], [], [], [], [], []
    for r in range(rounds):
        target = tmp / f"clone-{r}"
        cpu = cpu_seconds()
        started = time.perf_counter()
        subprocess.run(["git", "clone", "-q", "--local", str(src), str(target)], check=True, env=GIT_ENV)
        clone.append(time.perf_counter() - started)
        clone_cpu.append(cpu_seconds() - cpu)
        shutil.rmtree(target, ignore_errors=True)
        cpu, read, processes = cpu_seconds(), read_calls(), len(STARTED)
        started = time.perf_counter()
        # At the recorded commit, as runs.placement rebuilds.
        rebuilt = rebuild_workspace(tmp / f"host-b-{r}", source, commit, base, revision, recorded, tmp, (tmp,))
        rebuild.append(time.perf_counter() - started)
        rebuild_cpu.append(cpu_seconds() - cpu)
        reads.append(read_calls() - read)
        started_processes.append(len(STARTED) - processes)
        assert rebuilt.workspace.revision() == revision
        shutil.rmtree(tmp / f"host-b-{r}", ignore_errors=True)
    clone_ms, rebuild_ms = statistics.median(clone) * 1000, statistics.median(rebuild) * 1000
    return {
        "writes": writes,
        "git_clone_local_ms": round(clone_ms, 1),
        "rebuild_ms": round(rebuild_ms, 1),
        "ratio_rebuild_vs_clone": round(rebuild_ms / clone_ms, 2),
        # Beside the times, what load changes little: CPU (this process and its
        # children: git) and this process's read system calls (the files it read).
        "git_clone_local_cpu_ms": round(statistics.median(clone_cpu) * 1000, 1),
        "rebuild_cpu_ms": round(statistics.median(rebuild_cpu) * 1000, 1),
        "rebuild_read_calls": statistics.median(reads),
        "rebuild_processes": statistics.median(started_processes),
    }


def takeover() -> list[dict[str, Any]]:
    """tests/test_host_takeover.py's own figures (it needs root, Docker and PostgreSQL)."""
    var = Path(tempfile.mkdtemp(prefix="bench-takeover-"))
    env = {**os.environ, "DATABASE_URL": PG_URL, "HARNESS_VAR_DIR": str(var)}
    argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/test_host_takeover.py"]
    done = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True)
    try:
        if done.returncode != 0:
            raise SystemExit(f"tests/test_host_takeover.py failed:\n{done.stdout[-3000:]}")
        figures: list[dict[str, Any]] = json.loads((var / "host_takeover.json").read_text())
        return figures
    finally:
        shutil.rmtree(var, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--writes", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--example-only", action="store_true", help="only examples/orders, no generated repository")
    parser.add_argument("--huge", action="store_true", help="also a 100,000-file repository")
    parser.add_argument("--takeover", action="store_true", help="also run tests/test_host_takeover.py for the takeover time")
    parser.add_argument("--dir", default=None, help="where the trees are made (a tmpfs measures less of a shared disk)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    sys.addaudithook(_count_processes)
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="bench-rebuild-", dir=args.dir) as where:
        tmp = Path(where)
        example_repository(tmp / "orders")
        results["examples/orders"] = measure(tmp / "orders", tmp, args.writes, args.rounds)
        for files in [] if args.example_only else [10_000, *([100_000] if args.huge else [])]:
            generate(tmp / f"repo-{files}", files)
            results[f"{files} files"] = measure(tmp / f"repo-{files}", tmp, args.writes, args.rounds)
    if args.takeover:
        results["takeover"] = takeover()
    if args.json:
        print(json.dumps(results, indent=2))
        return
    for name, figures in results.items():
        if name == "takeover":
            for case in figures:
                print(f"takeover {case['case']:>16}: {case['takeover_seconds']:.2f} s from SIGKILL to the verified rebuild (lease 4 s)")
            continue
        print(
            f"rebuild {name:>16}: {figures['rebuild_ms']:8.1f} ms with {figures['writes']} writes, "
            f"git clone --local {figures['git_clone_local_ms']:8.1f} ms, ratio {figures['ratio_rebuild_vs_clone']:.2f}; "
            f"CPU {figures['rebuild_cpu_ms']:.1f} / {figures['git_clone_local_cpu_ms']:.1f} ms, "
            f"{figures['rebuild_read_calls']:,.0f} read calls, {figures['rebuild_processes']:.0f} processes started"
        )


if __name__ == "__main__":
    main()
