"""What the publish's secret scan (common/secret_scan.py) costs on a large change,
against detect-secrets' own scan of a diff (``detect_secrets.core.scan.scan_diff``
with its default plugins and filters, which reads the diff with unidiff):

    python bench/secret_scan_cost.py [--lines N] [--rounds R] [--callgrind-lines M] [--json]

The diff is generated (fixed seed): new Python files of 500 lines of ordinary code
(calls, string literals, URLs, e-mail addresses, decorators, sha256 checksums,
uuids) with a planted secret every
1,000 lines. Both scan the same diff in interleaved rounds, in one process; the
figure is the ratio of the medians. With ``--callgrind-lines`` (0: skipped), each is
also counted by valgrind's callgrind on a diff of that many lines: instructions of a
run scanning it less a run scanning an empty diff, so start-up cancels out.

detect-secrets leaves out a file that is not on disk (its ``is_invalid_file``
filter), so the diff's files are created, empty, in a temporary directory the scans
run in."""

from __future__ import annotations

import argparse
import atexit
import hashlib
import json
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from machine import load, machine, now  # noqa: E402

FILE_LINES = 500
SECRET_EVERY = 1000
# Assembled, so that no scanner of this repository's own text finds them.
PLANTED = ("AKIA" + "Q7RZ3MXK2VNB8PLD", "ghp_" + "R8d2Kq7Lm4Nx9Pz3Vt6Wb1Yc5Hs0Jf2Ga7Qe")


def code_line(rng: random.Random, n: int) -> str:
    shapes = (
        lambda: f"def handle_{n}(request, order_id):",
        lambda: "    total = sum(item.price * item.quantity for item in order.items)  # cents",
        lambda: f'    return {{"id": order_id, "status": "ok", "count": {n}}}',
        lambda: '    logger.info("processed %s orders in %.2f s", count, elapsed)',
        lambda: f'    url = "https://api.example.com/v1/orders/{n}?page={rng.randint(1, 99)}"',
        lambda: f'    checksum = "{hashlib.sha256(str(n).encode()).hexdigest()}"',
        lambda: f'    run_id = "{uuid.UUID(int=rng.getrandbits(128))}"',
        lambda: f'        raise ValueError("missing value {n} for " + name)',
        lambda: "",
        lambda: f"    max_tokens = {rng.randint(1000, 100000)}",
        lambda: "    @property",
        lambda: f'    contact = "orders-{n}@example.com"',
    )
    return rng.choice(shapes)()


def generated_diff(lines: int, seed: int = 7) -> tuple[str, list[str]]:
    """A diff adding ``lines`` lines in new files, and the files' names."""
    rng = random.Random(seed)
    parts, names = [], []
    for first in range(0, lines, FILE_LINES):
        count = min(FILE_LINES, lines - first)
        name = f"src/orders/module_{first // FILE_LINES:03d}.py"
        body = []
        for n in range(first, first + count):
            planted = PLANTED[(n // SECRET_EVERY) % len(PLANTED)]
            body.append(f'    key = "{planted}"' if n % SECRET_EVERY == SECRET_EVERY - 1 else code_line(rng, n))
        names.append(name)
        header = f"diff --git a/{name} b/{name}\nnew file mode 100644\n--- /dev/null\n+++ b/{name}\n@@ -0,0 +1,{count} @@\n"
        parts.append(header + "".join(f"+{line}\n" for line in body))
    return "".join(parts), names


def scanners() -> dict[str, Callable[[str], int]]:
    """Each scanner, as a function of the diff giving its number of findings."""
    from detect_secrets.core.scan import scan_diff
    from detect_secrets.settings import default_settings

    from common.secret_scan import SecretScanner

    # A server's configured values (a database password, provider keys).
    harness = SecretScanner(values=[f"secret-value-{n:02d}-{'x' * 24}" for n in range(6)], key=b"bench")

    def detect_secrets(diff: str) -> int:
        with default_settings():
            return sum(1 for _ in scan_diff(diff))

    return {"harness": lambda diff: len(harness.scan(diff, "Add the order modules")), "detect_secrets": detect_secrets}


def in_workspace(names: list[str]) -> None:
    """A temporary directory holding the diff's files (empty), as the current one."""
    where = Path(tempfile.mkdtemp(prefix="bench-scan-"))
    atexit.register(shutil.rmtree, where, True)
    for name in names:
        (where / name).parent.mkdir(parents=True, exist_ok=True)
        (where / name).touch()
    os.chdir(where)


def callgrind(kind: str, lines: int) -> int:
    """Instructions of a whole run of ``kind`` scanning a diff of ``lines`` lines."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "callgrind.out"
        subprocess.run(
            ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", sys.executable, __file__, "--once", kind, str(lines)],
            check=True,
            capture_output=True,
        )
        found = re.search(r"^summary:\s+(\d+)", out.read_text(), re.MULTILINE)
        assert found is not None
        return int(found.group(1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lines", type=int, default=30000)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--callgrind-lines", type=int, default=3000)
    parser.add_argument("--json", action="store_true", help="JSON (what it always prints), as run_all asks every benchmark")
    parser.add_argument("--once", nargs=2, metavar=("KIND", "LINES"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.once:
        diff, names = generated_diff(int(args.once[1]))
        in_workspace(names)
        scan = scanners()[args.once[0]]
        scan(diff)
        return
    diff, names = generated_diff(args.lines)
    in_workspace(names)
    scans = scanners()
    findings = {kind: scan(diff) for kind, scan in scans.items()}  # warmed: every import and compiled expression
    seconds: dict[str, list[float]] = {kind: [] for kind in scans}
    for _ in range(args.rounds):
        for kind, scan in scans.items():
            start = time.process_time()
            scan(diff)
            seconds[kind].append(time.process_time() - start)
    median = {kind: statistics.median(values) for kind, values in seconds.items()}
    result: dict[str, object] = {
        **{f"{kind}_cpu_ms": round(value * 1000, 1) for kind, value in median.items()},
        "harness / detect_secrets": round(median["harness"] / median["detect_secrets"], 3),
        **{f"{kind}_findings": count for kind, count in findings.items()},
        "planted": args.lines // SECRET_EVERY,
    }
    if args.callgrind_lines:
        for kind in scans:
            result[f"{kind}_instructions_{args.callgrind_lines}_lines"] = callgrind(kind, args.callgrind_lines) - callgrind(kind, 0)
        result["harness / detect_secrets, instructions"] = round(
            int(str(result[f"harness_instructions_{args.callgrind_lines}_lines"]))
            / int(str(result[f"detect_secrets_instructions_{args.callgrind_lines}_lines"])),
            3,
        )
    result.update(lines=args.lines, rounds=args.rounds, machine=machine(), load=load(), at=now())
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
