"""Every benchmark runs in `make bench QUICK=1` (CI), so none can stop running unseen:
a script of bench/ that is a benchmark (it runs as a program) is in run_all's list."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.fixtures_services import ROOT

# The one program of bench/ that is not a benchmark: the runner itself.
NOT_BENCHMARKS = {"run_all"}


def runs_as_a_program(path: Path) -> bool:
    tree = ast.parse(path.read_text())
    return any(isinstance(node, ast.If) and "__main__" in ast.unparse(node.test) for node in tree.body)


def listed() -> set[str]:
    """The names of run_all.py's BENCHMARKS (read, not imported: bench/ is no package)."""
    tree = ast.parse((ROOT / "bench" / "run_all.py").read_text())
    [table] = [node.value for node in tree.body if isinstance(node, ast.AnnAssign) and ast.unparse(node.target) == "BENCHMARKS"]
    assert isinstance(table, ast.Dict)
    return {ast.literal_eval(key) for key in table.keys if key is not None}


def test_it_lists_every_benchmark_for_the_quick_run() -> None:
    programs = {path.stem for path in (ROOT / "bench").glob("*.py") if runs_as_a_program(path)} - NOT_BENCHMARKS
    assert programs, "bench/ has benchmarks"
    assert programs - listed() == set(), "a benchmark run_all.py does not run (make bench QUICK=1 in CI would miss it)"
    assert listed() - programs == set(), "run_all.py lists a benchmark that is not in bench/"


def test_it_makes_ci_run_the_quick_benchmarks() -> None:
    assert "make bench QUICK=1" in (ROOT / ".ci" / "run").read_text()
    assert "$(if $(QUICK),--quick)" in (ROOT / "Makefile").read_text()
