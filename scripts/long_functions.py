"""List the functions of the product's packages longer than a limit (60 lines by
default), longest first, so a long one is split or says in its docstring why not.

    python3 scripts/long_functions.py [--limit N] [paths...]

Counts the lines from ``def`` to the function's last line, docstring and comments
included; nested functions count towards the function they are in and are listed too.
Exits 0 either way: this is a report, not a gate."""

from __future__ import annotations

import argparse
import ast
from pathlib import Path

PACKAGES = ("api", "approvals", "common", "harness_site", "live", "notifications", "pages", "runs", "sandbox")


def long_functions(paths: list[Path], limit: int) -> list[tuple[int, str, str]]:
    found: list[tuple[int, str, str]] = []
    for path in paths:
        files = [path] if path.is_file() else sorted(path.rglob("*.py"))
        for file in files:
            if "migrations" in file.parts:
                continue
            tree = ast.parse(file.read_text(), filename=str(file))
            for node in ast.walk(tree):
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.end_lineno is not None:
                    length = node.end_lineno - node.lineno + 1
                    if length > limit:
                        found.append((length, f"{file}:{node.lineno}", node.name))
    return sorted(found, reverse=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, default=60)
    parser.add_argument("paths", nargs="*", type=Path)
    options = parser.parse_args()
    paths = options.paths or [Path(name) for name in PACKAGES if Path(name).is_dir()]
    for length, where, name in long_functions(paths, options.limit):
        print(f"{length:4d}  {where}  {name}")


if __name__ == "__main__":
    main()
