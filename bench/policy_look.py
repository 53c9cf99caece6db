"""What the look at the policy's version costs, which a run driven by ``advance`` makes
before every proposal (``approvals.policies.newest_version``: a policy saved mid-run
decides the next proposal), against the same query built by the ORM each time (the
code before 2026-12-06), both in one process on a fresh SQLite database:

- CPU per look, the two alternated over ``--rounds`` rounds of ``--looks`` looks
  (median of the rounds);
- instructions per look (callgrind, ``--callgrind N`` looks of each after a warm-up,
  bench/instructions.py), the figure load does not change.

    python bench/policy_look.py [--looks 2000] [--rounds 6] [--callgrind 500] [--json]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from machine import child_env, load, machine, now  # noqa: E402

from bench.instructions import available, measured, parts  # noqa: E402

Look = Callable[[], int | None]


def looks() -> tuple[Look, Look]:
    """In the child, on its database: (the ORM's query, the product's look)."""
    import django

    django.setup()
    from django.core.management import call_command

    from approvals.models import PolicyVersion
    from approvals.policies import current_policy_row, newest_version

    call_command("migrate", verbosity=0)
    row = current_policy_row()
    project = row.project_id

    def orm() -> int | None:
        return PolicyVersion.objects.filter(project_id=project).order_by("-version").values_list("version", flat=True).first()

    def statement() -> int | None:
        return newest_version(project)

    assert orm() == statement() == row.version
    return orm, statement


def child(count: int, rounds: int, callgrind: bool) -> dict[str, float]:
    pair = looks()
    if callgrind:
        for look in pair:
            for _ in range(50):
                look()
            measured(lambda look=look: [look() for _ in range(count)])  # type: ignore[misc]
        return {}
    cpu: dict[str, list[float]] = {"orm": [], "statement": []}
    for r in range(rounds):
        order = list(zip(("orm", "statement"), pair, strict=True))
        for name, look in order if r % 2 == 0 else order[::-1]:
            started = time.process_time()
            for _ in range(count):
                look()
            cpu[name].append((time.process_time() - started) / count * 1e6)
    return {f"{name}_cpu_us": round(statistics.median(values), 1) for name, values in cpu.items()}


def measure(count: int, rounds: int, callgrind: int) -> dict[str, Any]:
    folder = Path(tempfile.mkdtemp(prefix="bench-policy-look-"))
    env = child_env(folder)
    try:
        argv = [sys.executable, __file__, "--child", "--looks", str(count), "--rounds", str(rounds)]
        out = subprocess.run(argv, env=env, capture_output=True, text=True, check=True).stdout
        result: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
        if callgrind:
            orm, statement = parts([__file__, "--child", "--callgrind-child", "--looks", str(callgrind)], 2, env)
            result.update(
                orm_instructions=round(orm / callgrind),
                statement_instructions=round(statement / callgrind),
                instruction_ratio=round(statement / orm, 3),
            )
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    result["cpu_ratio"] = round(result["statement_cpu_us"] / result["orm_cpu_us"], 3)
    return {"machine": machine(), "when": now(), "load": load(), "looks": count, "rounds": rounds, **result}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--looks", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--callgrind", type=int, default=500, metavar="N", help="looks of each under callgrind; 0: none")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--callgrind-child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.looks, args.rounds, args.callgrind_child)))
        return
    result = measure(args.looks, args.rounds, args.callgrind if available() else 0)
    print(json.dumps(result, indent=None if args.json else 2))


if __name__ == "__main__":
    main()
