"""What the checkpoint's own cursor (runs/persistence/rows.py ``checkpoint_cursor``: psycopg's
cursor, binding on the server, statements kept prepared) saves the client over
Django's default cursor (binding on the client: every value quoted into the SQL text
in Python), per statement of a checkpoint's shape: one row of an event, a dozen
values. It is the measured reason for the one private psycopg method the project
overrides (``_ServerBindingCursor``).

    DATABASE_URL=postgres://... python bench/checkpoint_cursor.py [--statements N] [--trials T] [--callgrind]

CPU time of this process per statement (median of interleaved trials); with
``--callgrind``, also the instructions per statement counted by valgrind's callgrind:
the run with N statements less the run with none, over N, so start-up cancels out."""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from machine import load, machine, now  # noqa: E402

TABLE = "bench_checkpoint_cursor"
COLUMNS = "run_id uuid, seq integer, type text, payload text, at timestamptz, kind text, actor text, call_id text, tool text, ok boolean, size integer, note text"
INSERT = f"INSERT INTO {TABLE} VALUES ({', '.join(['%s'] * 12)})"


def row(seq: int) -> list[object]:
    payload = json.dumps({"tool": "read_file", "args": {"path": "src/calc.py"}, "seq": seq})
    return [uuid.UUID(int=7), seq, "call_proposed", payload, datetime.now(UTC), "tool", "model", f"c{seq}", "read_file", True, 120, ""]


def cursors(kind: str) -> Any:
    from django.db import connection

    from runs.persistence.rows import checkpoint_cursor

    return checkpoint_cursor(connection) if kind == "checkpoint" else connection.cursor()


def statements(kind: str, count: int) -> float:
    """CPU seconds for ``count`` INSERTs through ``kind``'s cursor."""
    started = time.process_time()
    with cursors(kind) as cursor:
        for seq in range(count):
            cursor.execute(INSERT, row(seq))
    return time.process_time() - started


def setup() -> None:
    import django

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "harness_site.settings")
    # DEBUG off, as deployed: with DEBUG on Django logs every query, in Python.
    os.environ["DEBUG"] = "0"
    os.environ.setdefault("SECRET_KEY", uuid.uuid4().hex * 2)
    django.setup()
    from django.db import connection

    if connection.vendor != "postgresql":
        raise SystemExit("set DATABASE_URL to a PostgreSQL database: the saving is PostgreSQL's server-side binding")
    with connection.cursor() as cursor:
        cursor.execute(f"CREATE TEMPORARY TABLE {TABLE} ({COLUMNS})")


def callgrind(kind: str, count: int) -> int:
    """Instructions of a whole run of ``count`` statements under callgrind."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "callgrind.out"
        subprocess.run(
            ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", sys.executable, __file__, "--once", kind, str(count)],
            check=True,
            capture_output=True,
        )
        found = re.search(r"^summary:\s+(\d+)", out.read_text(), re.MULTILINE)
        assert found is not None
        return int(found.group(1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--statements", type=int, default=500)
    parser.add_argument("--trials", type=int, default=7)
    parser.add_argument("--json", action="store_true", help="JSON (what it always prints), as run_all asks every benchmark")
    parser.add_argument("--callgrind", action="store_true")
    parser.add_argument("--once", nargs=2, metavar=("KIND", "COUNT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    setup()
    if args.once:
        statements(args.once[0], int(args.once[1]))
        return
    kinds = ("checkpoint", "django")
    for kind in kinds:  # prepared, warmed
        statements(kind, 20)
    trials: dict[str, list[float]] = {kind: [] for kind in kinds}
    for _ in range(args.trials):
        for kind in kinds:
            trials[kind].append(statements(kind, args.statements) / args.statements)
    result: dict[str, Any] = {f"{kind}_cpu_us_per_statement": round(statistics.median(values) * 1e6, 1) for kind, values in trials.items()}
    if args.callgrind:
        for kind in kinds:
            per = (callgrind(kind, args.statements) - callgrind(kind, 0)) / args.statements
            result[f"{kind}_instructions_per_statement"] = round(per)
    result.update(statements=args.statements, trials=args.trials, machine=machine(), load=load(), at=now())
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
