"""What a check may write and how much (tests/sandbox_threats.py): scratch bounds it,
a check that must write its tree gets a throwaway copy, the workspace has a quota and
the worker's disk a reserve, and a huge workspace is not walked per check."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import docker
import pytest

from core.policy import CheckDef, SandboxLimits
from sandbox.container.quota import DiskQuota
from sandbox.executor import SandboxExecutor
from sandbox.tools.context import ToolSettings
from sandbox.workspace.hashing import TreeHasher, TreeSink
from tests.fixtures_runtimes import RuntimeEngine
from tests.fixtures_sandbox import (
    SURVIVE,
    TEST_LIMITS,
    WRITE_PATHS,
    drive,
    example_workspace,
    sandbox_policy,
    start_container,
    step,
)
from tests.sandbox_threats import assert_survived, check

pytestmark = [pytest.mark.docker]


DISK_FILLER = check(
    "fill",
    "python3",
    "-c",
    # First the workspace (read-only to checks), then 400 MB into scratch in 1 MB
    # writes, half of it under a hidden directory.
    "import os\n"
    "for target in ['junk.bin', 'tests/test_total.py']:\n"
    "    try:\n"
    "        open(target, 'wb')\n"
    "    except OSError as exc:\n"
    "        print('workspace:', exc.strerror)\n"
    "os.makedirs(os.environ['TMPDIR'] + '/.hidden')\n"
    "chunk = os.urandom(1 << 20)\n"
    "written = 0\n"
    "try:\n"
    "    with open(os.environ['TMPDIR'] + '/.hidden/junk', 'wb') as hidden, open(os.environ['TMPDIR'] + '/junk', 'wb') as plain:\n"
    "        for i in range(400):\n"
    "            (hidden if i % 2 else plain).write(chunk)\n"
    "            hidden.flush(); plain.flush()\n"
    "            written += 1\n"
    "except OSError as exc:\n"
    "    print('scratch:', exc.strerror, 'after', written, 'MB')\n"
    "    raise SystemExit(1)\n"
    "print('filled')\n",
    timeout=120,
)
SCRATCH_LEFT = check("scratch_left", "python3", "-B", "-c", "import os; print('scratch entries:', len(os.listdir(os.environ['TMPDIR'])))")


def usage_bytes(root: Path) -> int:
    """What the tree occupies, by a full walk (as du counts)."""
    walker = TreeHasher()
    walker.tree(root)
    return walker.allocated


def tree_files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file() and not p.is_symlink()}


def quota_executor(tmp_path: Path, run_id: str, quota: DiskQuota, limits: SandboxLimits) -> SandboxExecutor:
    from runs.persistence.artifacts import ArtifactStorage
    from runs.persistence.outbox import DatabaseOutbox

    workspace = example_workspace(tmp_path / run_id)
    container = start_container(run_id, workspace, limits)
    return SandboxExecutor(
        run_id, workspace, container, ArtifactStorage(), DatabaseOutbox(), ToolSettings(write_paths=WRITE_PATHS, quota=quota)
    )


def test_it_bounds_what_a_check_writes_by_its_scratch_and_leaves_the_workspace_unchanged(
    runtime_engine: RuntimeEngine, tmp_path: Path, db: None
) -> None:
    """Stronger than the old quota on the workspace (measured every half second while
    the check wrote into it): the check cannot write the workspace at all, and the
    kernel stops it at the scratch tmpfs's size, which is emptied after the check."""
    from sandbox.container.quota import MB

    limits = runtime_engine.limits(TEST_LIMITS).model_copy(update={"scratch_mb": 20})
    executor = quota_executor(tmp_path, "disk-fill", DiskQuota(workspace_max_bytes=20 * MB), limits)
    used_before, revision_before = usage_bytes(executor.workspace.dir), executor.revision()
    try:
        script = [step("run_check", check_id="fill"), step("run_check", check_id="scratch_left"), *SURVIVE]
        outcome = drive(executor, sandbox_policy(DISK_FILLER, SCRATCH_LEFT, limits=limits), script)
    finally:
        executor.close()
    filled = outcome.receipt("run_check", "fill")["data"]
    assert filled["exit_code"] == 1 and "filled" not in filled["output"], filled
    assert filled["output"].count("workspace: Read-only file system") == 2
    written = int(filled["output"].split("scratch: No space left on device after ")[1].split()[0])
    assert 15 <= written <= 20, filled["output"]
    assert usage_bytes(executor.workspace.dir) == used_before and executor.revision() == revision_before
    assert "scratch entries: 0" in outcome.receipt("run_check", "scratch_left")["data"]["output"]
    assert_survived(outcome)


ON_COPY_FILLER = CheckDef(
    check_id="build_big",
    command=[
        "python3",
        "-c",
        # In its throwaway copy of the tree, as a build writing its output in place would.
        "import os\n"
        "print('in', os.getcwd())\n"
        "chunk = os.urandom(1 << 20)\n"
        "written = 0\n"
        "try:\n"
        "    with open('orders/build.bin', 'wb') as out:\n"
        "        for _ in range(400):\n"
        "            out.write(chunk); out.flush(); written += 1\n"
        "except OSError as exc:\n"
        "    print('copy:', exc.strerror, 'after', written, 'MB')\n"
        "    raise SystemExit(1)\n"
        "print('built 400 MB')\n",
    ],
    timeout_seconds=120,
    on_copy=True,
)


def test_it_bounds_an_on_copy_check_by_its_scratch(runtime_engine: RuntimeEngine, tmp_path: Path, db: None) -> None:
    """A check that must write its tree writes a copy of it in scratch: the kernel
    stops it at the scratch size as it stops any other check, with no watch of the
    tree, and the workspace is as it was."""

    limits = runtime_engine.limits(TEST_LIMITS).model_copy(update={"scratch_mb": 20})
    executor = quota_executor(tmp_path, "copy-fill", DiskQuota(), limits)
    used_before, revision_before = usage_bytes(executor.workspace.dir), executor.revision()
    try:
        script = [step("run_check", check_id="build_big"), step("run_check", check_id="scratch_left"), *SURVIVE]
        outcome = drive(executor, sandbox_policy(ON_COPY_FILLER, SCRATCH_LEFT, limits=limits), script)
    finally:
        executor.close()
    built = outcome.receipt("run_check", "build_big")["data"]
    assert built["exit_code"] == 1 and "in /tmp/tree" in built["output"] and "built" not in built["output"], built
    written = int(built["output"].split("copy: No space left on device after ")[1].split()[0])
    assert written < 20, built["output"]
    assert usage_bytes(executor.workspace.dir) == used_before and executor.revision() == executor.verify() == revision_before
    assert not (executor.workspace.dir / "orders" / "build.bin").exists()
    assert "scratch entries: 0" in outcome.receipt("run_check", "scratch_left")["data"]["output"]
    assert_survived(outcome)


OUTSIDE_SCRATCH = check(
    "outside",
    "python3",
    "-c",
    "import os\n"
    "written = []\n"
    "for path in ['/workspace/orders/planted.py', '/workspace/orders/total.py', '/workspace/conftest.py', '/planted',\n"
    "             '/etc/planted', '/var/tmp/planted', '/run/planted', '/usr/lib/planted', '/dev/planted']:\n"
    "    try:\n"
    "        with open(path, 'a') as handle:\n"
    "            handle.write('planted')\n"
    "    except OSError as exc:\n"
    "        print('refused', path, exc.strerror)\n"
    "    else:\n"
    "        written.append(path)\n"
    "for place in [os.environ['TMPDIR'], '/dev/shm']:\n"
    "    with open(place + '/left-behind', 'w') as handle:\n"
    "        handle.write('for the next check')\n"
    "    print('scratch written', place)\n"
    "raise SystemExit('written: %s' % written if written else 0)\n",
)
LEFT_BEHIND = check(
    "left_behind", "python3", "-c", "import os; print('left:', sorted(os.listdir(os.environ['TMPDIR']) + os.listdir('/dev/shm')))"
)


def test_it_refuses_every_write_outside_scratch_and_leaves_the_tree_unchanged(sandbox: SandboxExecutor) -> None:
    before, files_before = sandbox.revision(), tree_files(sandbox.workspace.dir)
    script = [step("run_check", check_id="outside"), step("run_check", check_id="left_behind"), *SURVIVE]
    outcome = drive(sandbox, sandbox_policy(OUTSIDE_SCRATCH, LEFT_BEHIND), script)
    outside = outcome.receipt("run_check", "outside")["data"]
    assert outside["exit_code"] == 0, outside["output"]
    assert outside["output"].count("refused ") == 9 and outside["output"].count("scratch written") == 2, outside["output"]
    assert "left: []" in outcome.receipt("run_check", "left_behind")["data"]["output"]
    assert sandbox.revision() == sandbox.verify() == before and tree_files(sandbox.workspace.dir) == files_before
    assert_survived(outcome)


def test_it_runs_a_check_in_a_workspace_of_300000_files(
    docker_engine: docker.DockerClient, monkeypatch: pytest.MonkeyPatch, db: None
) -> None:
    """The old quota walked the tree during every check and refused one above 200,000
    entries. Now nothing is walked per check: the whole run walks its tree twice (when
    it is picked up and when it finishes), however many checks it runs.

    The tree is made of empty files on a tmpfs (/dev/shm), so the test measures the
    harness and not the shared disk (300,000 files took minutes to create on it), and
    runs under runc (gVisor's ptrace platform takes minutes to list them)."""
    import tempfile

    from runs.persistence.artifacts import ArtifactStorage
    from runs.persistence.outbox import DatabaseOutbox
    from sandbox.workspace import hashing

    base = Path(tempfile.mkdtemp(prefix="harness-huge-", dir="/dev/shm"))
    try:
        workspace = example_workspace(base / "huge")
        vendor = workspace.dir / "vendor"
        for d in range(300):
            (vendor / f"d{d}").mkdir(parents=True)
            for f in range(1000):
                os.close(os.open(vendor / f"d{d}" / f"f{f}", os.O_CREAT | os.O_WRONLY, 0o644))
        workspace.reread()  # the tree was grown around the harness's tools, on purpose
        container = start_container("huge", workspace)
        executor = SandboxExecutor("huge", workspace, container, ArtifactStorage(), DatabaseOutbox(), ToolSettings(write_paths=WRITE_PATHS))
        counted = check("count", "sh", "-c", "find . -type f | wc -l", timeout=120)
        walks: list[str] = []
        real = hashing.TreeHasher.tree

        def walking(self: TreeHasher, root: Path, sink: TreeSink | None = None) -> str:
            walks.append(str(root))
            return real(self, root, sink)

        monkeypatch.setattr(hashing.TreeHasher, "tree", walking)
        try:
            script = [step("run_check", check_id="count"), step("run_check", check_id="count"), *SURVIVE]
            outcome = drive(executor, sandbox_policy(counted), script)
        finally:
            executor.close()
    finally:
        shutil.rmtree(base)
    receipts = [r["data"] for r in outcome.receipts("run_check")]
    assert [r["exit_code"] for r in receipts] == [0, 0, 0], receipts
    assert int(receipts[0]["output"].strip()) > 300_000
    assert [(e.check_id, e.passed, e.current) for e in outcome.of_type("evidence_recorded")] == [
        ("count", True, True),
        ("count", True, True),
        ("smoke", True, True),
    ]
    assert len(walks) == 2, walks
    assert_survived(outcome)


def test_it_runs_no_check_in_a_workspace_over_its_quota(runtime_engine: RuntimeEngine, tmp_path: Path, db: None) -> None:
    from sandbox.container.quota import MB

    executor = quota_executor(tmp_path, "disk-quota", DiskQuota(workspace_max_bytes=1 * MB), runtime_engine.limits(TEST_LIMITS))
    try:
        script = [step("write_file", path="orders/big.py", content="#" * (3 * MB)), *SURVIVE]
        outcome = drive(executor, sandbox_policy(), script)
    finally:
        executor.close()
    smoke = outcome.receipt("run_check", "smoke")["data"]
    assert smoke["error"] == "the check was not run: the workspace holds 3 MB, over its quota of 1 MB"
    assert all(not e.passed for e in outcome.state.evidence) and outcome.state.outcome != "complete"


def test_it_runs_no_check_when_the_workers_disk_is_short_of_its_reserve(runtime_engine: RuntimeEngine, tmp_path: Path, db: None) -> None:
    import shutil

    from sandbox.container.quota import MB

    free = shutil.disk_usage(tmp_path).free
    executor = quota_executor(tmp_path, "disk-reserve", DiskQuota(reserve_bytes=free + 1024 * MB), runtime_engine.limits(TEST_LIMITS))
    try:
        outcome = drive(executor, sandbox_policy(), SURVIVE)
    finally:
        executor.close()
    # Not the run's doing: retried like a transient failure, never a failed check.
    attempts = outcome.receipts("run_check")
    assert [r["status"] for r in attempts] == ["transient", "transient"]
    assert attempts[0]["data"]["error"].startswith("the check was not run: the worker's disk has ")
    assert outcome.state.outcome == "attempt_limit" and outcome.state.evidence == []


BUILD_IN_TREE = ["sh", "-c", "echo built > orders/built.txt && cat orders/built.txt && pwd"]


def test_it_runs_a_check_that_must_write_its_tree_on_a_throwaway_copy(sandbox: SandboxExecutor) -> None:
    in_place = check("in_place", *BUILD_IN_TREE)
    on_copy = CheckDef(check_id="on_copy", command=BUILD_IN_TREE, timeout_seconds=30, on_copy=True)
    before = sandbox.revision()
    script = [step("run_check", check_id="in_place"), step("run_check", check_id="on_copy"), *SURVIVE]
    outcome = drive(sandbox, sandbox_policy(in_place, on_copy), script)
    refused = outcome.receipt("run_check", "in_place")["data"]
    assert refused["exit_code"] != 0 and ("Read-only file system" in refused["output"] or "Permission denied" in refused["output"])
    built = outcome.receipt("run_check", "on_copy")["data"]
    assert built["exit_code"] == 0 and built["output"] == "built\n/tmp/tree\n", built
    assert [(e.check_id, e.passed, e.current) for e in outcome.of_type("evidence_recorded")][:2] == [
        ("in_place", False, True),
        ("on_copy", True, True),
    ]
    assert sandbox.revision() == before and not (sandbox.workspace.dir / "orders" / "built.txt").exists()
    assert_survived(outcome)
