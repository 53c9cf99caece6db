"""How long a process takes to start: a worker's imports (Django set up, then the
tasks module the Celery app discovers) and ``manage.py check``. Each command runs in
a fresh interpreter, the commands interleaved round by round so a change in the
machine's load falls on all of them alike; the medians of the wall time and of the
CPU time (the child's user and system time, which a busy machine stretches far less)
are printed with the load.
Given several ``--tree`` checkouts (a change's before and after), every command runs
in each of them in the same rounds.
``--importtime`` also reports, from ``python -X importtime``, how much of the
worker's import time is the MCP SDK's (``mcp`` and ``mcp_types``), and how many
modules it imports, the SDK's among them: counts that load does not change.

    python bench/startup.py [--rounds 15] [--importtime] [--tree PATH ...]"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))

from machine import load, machine, now  # noqa: E402

WORKER = "import django; django.setup(); import runs.tasks"
COMMANDS = {
    "worker_imports": [sys.executable, "-c", WORKER],
    "manage_py_check": [sys.executable, "manage.py", "check"],
}
SDK = ("mcp", "mcp_types")


def environment() -> dict[str, str]:
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "harness_site.settings", "DEBUG": "1"}
    # Bytecode as a deployed process has it: compiled once, read after.
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def timed(argv: list[str], env: dict[str, str], tree: Path) -> tuple[float, float]:
    """(wall, CPU) seconds of one run of ``argv``: the CPU is what the child used, user
    and system, from the children's usage before and after (one child at a time)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    subprocess.run(argv, cwd=tree, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def sdk_share(env: dict[str, str], tree: Path) -> dict[str, float]:
    """The worker's cumulative import time, and the part of it under the MCP SDK's
    top-level packages (each counted once, where it was first imported)."""
    err = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", WORKER], cwd=tree, env=env, check=True, capture_output=True, text=True
    ).stderr
    lines: list[tuple[int, int, str]] = []  # (depth, cumulative µs, module)
    for line in err.splitlines():
        if not line.startswith("import time:") or "cumulative" in line:
            continue
        _own, spent, module = line[len("import time:") :].split("|")
        lines.append(((len(module) - len(module.lstrip()) - 1) // 2, int(spent), module.strip()))
    total = sum(cumulative for depth, cumulative, _name in lines if depth == 0)
    # Lines come children first: read backwards, a module's importer is read before it.
    sdk = sdk_modules = 0
    importers: list[tuple[int, bool]] = []  # (depth, under the SDK)
    for depth, cumulative, name in reversed(lines):
        while importers and importers[-1][0] >= depth:
            importers.pop()
        under = bool(importers) and importers[-1][1]
        own = name.split(".")[0] in SDK
        if own and not under:
            sdk += cumulative
        sdk_modules += own
        importers.append((depth, own or under))
    return {
        "imports_ms": round(total / 1000, 1),
        "mcp_sdk_ms": round(sdk / 1000, 1),
        # Each module is on one line, where it was first imported.
        "modules": len(lines),
        "mcp_sdk_modules": sdk_modules,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--json", action="store_true", help="JSON (what it always prints), as run_all asks every benchmark")
    parser.add_argument("--importtime", action="store_true")
    parser.add_argument("--tree", type=Path, action="append", help="a checkout to start from (default: this one)")
    args = parser.parse_args()
    env = environment()
    trees: list[Path] = args.tree or [ROOT]
    runs = {f"{name}@{tree}" if len(trees) > 1 else name: (argv, tree) for tree in trees for name, argv in COMMANDS.items()}
    for argv, tree in runs.values():  # compile bytecode, warm the page cache
        timed(argv, env, tree)
    times: dict[str, list[tuple[float, float]]] = {name: [] for name in runs}
    for _ in range(args.rounds):
        for name, (argv, tree) in runs.items():
            times[name].append(timed(argv, env, tree))
    result: dict[str, object] = {
        name: {
            "median_ms": round(statistics.median(wall for wall, _cpu in values) * 1000),
            "min_ms": round(min(wall for wall, _cpu in values) * 1000),
            "cpu_median_ms": round(statistics.median(cpu for _wall, cpu in values) * 1000),
        }
        for name, values in times.items()
    }
    if args.importtime:
        for tree in trees:
            result[f"worker_importtime@{tree}" if len(trees) > 1 else "worker_importtime"] = sdk_share(env, tree)
    result.update(rounds=args.rounds, machine=machine(), load=load(), at=now())
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
