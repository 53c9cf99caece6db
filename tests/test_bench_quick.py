"""Every benchmark runs in `make bench QUICK=1` (CI), so none can stop running unseen:
a script of bench/ that is a benchmark (it runs as a program) is in run_all's list."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.fixtures_services import ROOT

# The programs of bench/ that are not benchmarks: the runner, and the check of the
# counts against their baseline (make bench-check), which runs benchmarks itself.
NOT_BENCHMARKS = {"run_all", "bench_check"}


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


def test_it_makes_ci_check_the_counts_against_their_baseline() -> None:
    assert "make bench-check" in (ROOT / ".ci" / "run").read_text()
    assert "bench/bench_check.py" in (ROOT / "Makefile").read_text()


def test_it_measures_every_baseline_row_with_a_listed_benchmark() -> None:
    import json

    rows = json.loads((ROOT / "bench" / "baseline.json").read_text())
    assert rows
    for row in rows:
        assert row["benchmark"] in listed(), row
        assert set(row) == {"figure", "benchmark", "args", "key", "value", "tolerance", "command"}, row
        assert row["value"] > 0 and 0 <= row["tolerance"] < 1, row
