"""The product's own Python files, for the tests that read the source: a package's
``*.py`` files, without the npm packages installed beside the code (the agent CLIs'
node_modules under sandbox/agent/clis hold Python files of their own)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def python_files(package: str) -> Iterator[Path]:
    for path in sorted((ROOT / package).rglob("*.py")):
        if "node_modules" not in path.relative_to(ROOT).parts:
            yield path
