"""The bypasses of issue 12 (tests/sandbox_threats.py): checks that change the
workspace, patch headers read two ways, file names that forge diff headers."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from sandbox.executor import SandboxExecutor
from tests.fixtures_sandbox import (
    SURVIVE,
    drive,
    sandbox_policy,
    step,
)
from tests.helpers import published_patches
from tests.sandbox_threats import assert_survived, check

pytestmark = [pytest.mark.docker]


EVIL_PACKAGE = """from orders.total import order_total

import os, pathlib

root = pathlib.Path(__file__).resolve().parent.parent
attempts = {
    "rewrite tests": lambda: (root / "tests" / "test_total.py").write_text("def test_it():\\n    pass\\n"),
    "plant outside": lambda: (root / "conftest.py").write_text("collect_ignore = ['tests']\\n"),
    "newline header": lambda: os.makedirs(root / "orders" / "x\\n--- a" / "tests"),
    "separator": lambda: (root / "orders" / "total.py\\u2028.evil").write_text("x"),
    "control": lambda: (root / "orders" / "total.py\\x1c").write_text("x"),
    "plant inside": lambda: (root / "orders" / "extra.py").write_text("x"),
}
for name, attempt in attempts.items():
    try:
        attempt()
        print(name, "WRITTEN")
    except OSError as exc:
        print(name, "refused:", exc.strerror)
"""
IMPORT_ORDERS = check("import_orders", "python3", "-c", "import orders")


def test_it_keeps_code_the_model_wrote_from_changing_the_workspace_during_a_check(sandbox: SandboxExecutor, tmp_path: Path) -> None:
    """Bypass 1 (and 3, through a check): repository code the model wrote, run by a
    check, tries to rewrite the tests, plant files outside the write paths and create
    names with a newline, a separator and a control character. Nothing changes; the
    evidence is for the revision the model wrote; publish ships only that."""
    script = [
        step("write_file", path="orders/__init__.py", content=EVIL_PACKAGE),
        step("run_check", check_id="import_orders"),
        step("run_check", check_id="smoke"),
        step("publish", message="fix"),
        step("finish", summary="done"),
    ]
    pristine_tests = (sandbox.workspace.pristine / "tests" / "test_total.py").read_bytes()
    outcome = drive(sandbox, sandbox_policy(IMPORT_ORDERS, allow_publish=True), script)
    output = outcome.receipt("run_check", "import_orders")["data"]["output"]
    assert "WRITTEN" not in output and output.count("refused: Read-only file system") == 6, output
    written = outcome.receipt("write_file")["revision"]
    assert outcome.receipt("run_check", "import_orders")["revision"] == written == sandbox.revision()
    evidence = outcome.of_type("evidence_recorded")
    assert [(e.check_id, e.revision, e.current) for e in evidence] == [("import_orders", written, True), ("smoke", written, True)]
    assert (sandbox.workspace.dir / "tests" / "test_total.py").read_bytes() == pristine_tests
    assert sorted(p.name for p in (sandbox.workspace.dir / "orders").iterdir()) == ["__init__.py", "total.py"]
    published = outcome.receipt("publish")["data"]
    assert published["files"] == ["orders/__init__.py"] and published["skipped"] == []
    assert_git_applies(sandbox, tmp_path)
    assert outcome.state.outcome == "complete", outcome.summary()


def test_it_refuses_separator_and_control_characters_in_patch_headers(sandbox: SandboxExecutor) -> None:
    """Bypass 2: the validator read lines with ``splitlines``, the applier with
    ``split("\\n")``; these headers passed validation for orders/total.py and created
    other files."""
    hunk = "@@ -0,0 +1 @@\n+x = 1\n"
    script = [
        step("apply_patch", patch=f"--- /dev/null\n+++ b/orders/total.py\u2028.evil\n{hunk}"),
        step("apply_patch", patch=f"--- /dev/null\n+++ b/orders/total.py\x1c/conftest.py\n{hunk}"),
        step("apply_patch", patch=f"--- /dev/null\n+++ b/orders/new.py\r\n{hunk}"),
        step("write_file", path="orders/x\n--- a/tests/test_total.py", content="x"),
        *SURVIVE,
    ]
    before = sandbox.revision()
    outcome = drive(sandbox, sandbox_policy(), script)
    problems = [e.problems for e in outcome.of_type("invalid_input")]
    assert [p[0].field for p in problems] == ["args.patch", "args.patch", "args.patch", "args.path"]
    messages = [p[0].message for p in problems]
    assert '"orders/total.py\\u2028.evil" contains U+2028 LINE SEPARATOR' in messages[0]
    assert '"orders/total.py\\x1c/conftest.py" contains U+001C' in messages[1]
    assert '"orders/new.py\\x0d" contains U+000D' in messages[2]
    assert '"orders/x\\x0a--- a/tests/test_total.py" contains U+000A' in messages[3]
    assert not any(c in m for m in messages for c in "\n\r\x1c\u2028")  # the names are shown escaped
    assert not outcome.receipts("apply_patch") and not outcome.receipts("write_file")
    assert sandbox.revision() == before
    assert_survived(outcome)


@pytest.mark.parametrize("caught_by", ["finish", "publish preview", "publish"])
def test_it_stops_a_run_whose_workspace_changed_around_the_harness_during_a_check(sandbox: SandboxExecutor, caught_by: str) -> None:
    """If the tree changes during a check (here the host writes while it runs; checks
    themselves cannot), nothing it vouched for is relied on: no walk follows each
    check, but the full walk before the run completes, before a reviewer is shown a
    publish and before publish ships finds the change, and the run stops."""
    writer = threading.Timer(0.5, lambda: (sandbox.workspace.dir / "orders" / "late.py").write_text("x = 1\n"))
    last = step("finish", summary="done") if caught_by == "finish" else step("publish", message="fix")
    script = [step("write_file", path="orders/total.py", content="TOTAL = 1\n"), step("run_check", check_id="smoke")]
    script += [step("run_check", check_id="slow"), last]

    def proposals(feedback: object, position: int) -> object | None:
        if position == 2:
            writer.start()  # while the slow check runs
        return script[position] if position < len(script) else None

    outcome = drive(sandbox, sandbox_policy(check("slow", "sleep", "2"), allow_publish=caught_by == "publish"), proposals)
    writer.join()
    assert outcome.receipt("run_check", "slow")["data"]["exit_code"] == 0
    assert outcome.state.stop_reason == "revision_mismatch", outcome.summary()
    assert "differs from a full walk" in outcome.state.stop_message
    assert outcome.state.outcome != "complete" and not outcome.receipts("publish")
    assert not published_patches(sandbox.run_id)


def assert_git_applies(executor: SandboxExecutor, tmp_path: Path) -> None:
    from tests.git_apply import git_applies_to_source

    (published,) = published_patches(executor.run_id).values()
    git_applies_to_source(executor.workspace, published, tmp_path / "git-check")
