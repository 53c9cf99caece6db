"""Threats against the sandbox, each driven through the real Harness with the real
executor, Docker engine and image. Each attack is a check (trusted policy naming an
untrusted command) or a file tool call; the test asserts what the harness recorded,
and that the run then goes on to finish normally."""

from __future__ import annotations

import hashlib
import os
import shutil
import threading
import time
from pathlib import Path

import docker
import pytest
from docker.errors import NotFound

from core.policy import CheckDef, SandboxLimits
from runs.artifacts import ArtifactStorage
from sandbox.executor import SandboxExecutor
from sandbox.hashing import TreeHasher, TreeSink
from sandbox.quota import MB, DiskQuota
from tests.fixtures_runtimes import RuntimeEngine
from tests.fixtures_sandbox import (
    SURVIVE,
    TEST_LIMITS,
    WRITE_PATHS,
    ModuleSandbox,
    Outcome,
    drive,
    example_workspace,
    sandbox_policy,
    start_container,
    step,
)
from tests.helpers import published_patches

pytestmark = [pytest.mark.docker]


def check(check_id: str, *command: str, timeout: int = 30) -> CheckDef:
    return CheckDef(check_id=check_id, command=list(command), timeout_seconds=timeout)


def assert_survived(outcome: Outcome) -> None:
    assert outcome.state.outcome == "complete", outcome.summary()
    assert outcome.receipt("run_check", "smoke")["data"]["exit_code"] == 0


def leftover_processes(module_sandbox: ModuleSandbox) -> list[list[str]]:
    processes: list[list[str]] = module_sandbox.engine.client.containers.get(module_sandbox.container.id).top()["Processes"]
    return processes


NETWORK = check(
    "network",
    "python3",
    "-c",
    "import os, socket\n"
    "print('interfaces:', sorted(os.listdir('/sys/class/net')))\n"
    "for target in [('1.1.1.1', 53), ('example.com', 443)]:\n"
    "    try:\n"
    "        socket.create_connection(target, timeout=3)\n"
    "    except OSError as exc:\n"
    "        print('blocked', target, exc)\n"
    "    else:\n"
    "        raise SystemExit('connected to %s' % (target,))\n"
    "raise SystemExit(3)\n",
)


def test_it_has_no_outbound_network(sandbox: SandboxExecutor) -> None:
    outcome = drive(sandbox, sandbox_policy(NETWORK), [step("run_check", check_id="network"), *SURVIVE])
    data = outcome.receipt("run_check", "network")["data"]
    assert data["exit_code"] == 3, data["output"]
    assert "interfaces: ['lo']" in data["output"]
    # runc: the kernel has no route; runsc: gVisor's netstack has none either.
    assert "Network is unreachable" in data["output"] or "No route to host" in data["output"]
    assert "connected" not in data["output"]
    assert_survived(outcome)


ESCAPE_WRITE = check(
    "escape_write",
    "sh",
    "-c",
    "for f in /etc/pwned /pwned /workspace/../pwned /usr/bin/pwned; do touch $f 2>&1; done; test ! -e /etc/pwned",
)


def test_it_refuses_writes_outside_the_workspace_and_the_allowed_paths(sandbox: SandboxExecutor) -> None:
    script = [
        step("write_file", path="../escape.txt", content="x"),
        step("write_file", path="/etc/passwd", content="x"),
        step("write_file", path="tests/test_total.py", content="def test_it(): pass\n"),
        step("apply_patch", patch="--- a/../outside.py\n+++ b/../outside.py\n@@ -0,0 +1 @@\n+x\n"),
        step("run_check", check_id="escape_write"),
        *SURVIVE,
    ]
    outcome = drive(sandbox, sandbox_policy(ESCAPE_WRITE), script)
    refusals = outcome.of_type("invalid_input")
    assert [r.problems[0]["field"] for r in refusals] == ["args.path", "args.path", "args.path", "args.patch"]
    assert "'..'" in refusals[0].problems[0]["message"]
    assert "relative" in refusals[1].problems[0]["message"]
    assert "outside allowed_write_paths" in refusals[2].problems[0]["message"]
    assert not outcome.receipts("write_file") and not outcome.receipts("apply_patch")  # nothing reached the executor
    data = outcome.receipt("run_check", "escape_write")["data"]
    # gVisor checks the permission before the read-only mount: either refusal will do.
    assert data["exit_code"] == 0 and data["output"].count("Read-only file system") + data["output"].count("Permission denied") == 4
    root = sandbox.workspace.root
    assert not (root / "escape.txt").exists() and not (root / "outside.py").exists() and not (root / "pwned").exists()
    assert (sandbox.workspace.dir / "tests" / "test_total.py").read_text() == (
        sandbox.workspace.pristine / "tests" / "test_total.py"
    ).read_text()
    assert_survived(outcome)


PLANT_LINKS = check(
    "plant_links",
    "sh",
    "-c",
    "ln -s /etc/shadow orders/shadow.py",
)


def plant_links_as_a_source_could(workspace_dir: Path) -> None:
    """A check can no longer plant links (the workspace is read-only to it); a
    workspace source can still contain them."""
    for name, target in [("passwd.py", "/etc/passwd"), ("root", "/"), ("up", "../.."), ("alias.py", "total.py")]:
        os.symlink(target, workspace_dir / "orders" / name)


def test_it_refuses_dotdot_and_symlink_escapes_even_when_a_check_planted_them(sandbox: SandboxExecutor) -> None:
    host_passwd = hashlib.sha256(Path("/etc/passwd").read_bytes()).hexdigest()
    plant_links_as_a_source_could(sandbox.workspace.dir)
    sandbox.workspace.reread()  # as if the source had held them from the start
    script = [
        step("read_file", path="../../etc/passwd"),
        step("run_check", check_id="plant_links"),
        step("read_file", path="orders/passwd.py"),
        step("read_file", path="orders/root/etc/passwd"),
        step("read_file", path="orders/up/pristine/orders/total.py"),
        step("read_file", path="orders/alias.py"),
        step("write_file", path="orders/passwd.py", content="pwned\n"),
        step("write_file", path="orders/root/tmp/pwned.py", content="pwned\n"),
        step(
            "apply_patch", patch="--- a/orders/passwd.py\n+++ b/orders/passwd.py\n@@ -1 +1 @@\n-root:x:0:0:root:/root:/bin/bash\n+pwned\n"
        ),
        step("search", pattern="root", path="orders/root"),
        step("list_files", path="orders"),
        *SURVIVE,
    ]
    outcome = drive(sandbox, sandbox_policy(PLANT_LINKS), script)
    assert outcome.of_type("invalid_input")[0].problems[0]["message"].endswith("must not contain '..'")
    planted = outcome.receipt("run_check", "plant_links")["data"]
    assert planted["exit_code"] == 1 and "Read-only file system" in planted["output"]
    reads = [r["data"] for r in outcome.receipts("read_file")]
    assert [d.get("error") for d in reads] == [
        "orders/passwd.py is a symlink (symlinks are never followed)",
        "orders/root is a symlink (symlinks are never followed)",
        "orders/up is a symlink (symlinks are never followed)",
        "orders/alias.py is a symlink (symlinks are never followed)",
    ]
    writes = outcome.receipts("write_file") + outcome.receipts("apply_patch") + outcome.receipts("search")
    assert all(r["effect"] == "none" and "symlink" in r["data"]["error"] for r in writes), writes
    listing = outcome.receipt("list_files")["data"]
    assert sorted(listing["symlinks"]) == ["orders/alias.py", "orders/passwd.py", "orders/root", "orders/up"]
    assert hashlib.sha256(Path("/etc/passwd").read_bytes()).hexdigest() == host_passwd
    assert (sandbox.workspace.dir / "orders" / "passwd.py").is_symlink()
    assert not Path("/tmp/pwned.py").exists()
    assert_survived(outcome)


FORK_BOMB = check(
    "fork_bomb",
    "python3",
    "-c",
    "import os\n"
    "failed = 0\n"
    "while True:\n"
    "    try:\n"
    "        os.fork()\n"
    "    except OSError as exc:\n"
    "        failed += 1\n"
    "        if failed == 1:\n"
    "            print('fork refused:', exc, flush=True)\n",
    timeout=4,
)


def test_it_stops_a_fork_bomb_with_the_pids_limit(sandbox: SandboxExecutor, module_sandbox: ModuleSandbox) -> None:
    outcome = drive(sandbox, sandbox_policy(FORK_BOMB), [step("run_check", check_id="fork_bomb"), *SURVIVE])
    receipt = outcome.receipt("run_check", "fork_bomb")
    data = receipt["data"]
    assert receipt["status"] == "ok"
    assert "Resource temporarily unavailable" in data["output"]
    if module_sandbox.engine.runtime == "runsc" and data["oom_killed"]:
        # Under gVisor every sandboxed process's memory is its kernel's, so the memory
        # limit may end the bomb before the time limit does, by killing that kernel.
        assert data["timed_out"] is False and data["duration_ms"] < 4000, data
    else:
        assert data["timed_out"] is True and data["exit_code"] is None, data
        # Under gVisor killing a hundred sandboxed processes takes a few seconds more.
        assert 4000 <= data["duration_ms"] < (9000 if module_sandbox.engine.runtime == "runc" else 15000)
    evidence = outcome.of_type("evidence_recorded")[0]
    assert evidence.check_id == "fork_bomb" and evidence.passed is False
    assert len(leftover_processes(module_sandbox)) == 1  # only the reaper, PID 1
    assert_survived(outcome)


MEMORY_BOMB = check("memory_bomb", "python3", "-c", "hoard = []\nwhile True:\n    hoard.append(b'x' * 10_000_000)\n")


MEMORY_BOMB_UNDER_GVISOR = check("memory_bomb", *MEMORY_BOMB.command, timeout=5)


def test_it_kills_a_memory_bomb_and_reports_it(sandbox: SandboxExecutor, module_sandbox: ModuleSandbox) -> None:
    runc = module_sandbox.engine.runtime == "runc"
    bomb = MEMORY_BOMB if runc else MEMORY_BOMB_UNDER_GVISOR
    outcome = drive(sandbox, sandbox_policy(bomb), [step("run_check", check_id="memory_bomb"), *SURVIVE])
    data = outcome.receipt("run_check", "memory_bomb")["data"]
    if runc:
        assert data["exit_code"] == 137
        assert data["oom_killed"] is True
        assert data["timed_out"] is False
    else:
        # gVisor's kernel is what the host OOM-kills: the sandbox dies whole, its
        # stream is cut at the deadline, and the container is restarted.
        assert data["timed_out"] is True and data["exit_code"] is None
    assert outcome.of_type("evidence_recorded")[0].passed is False
    assert_survived(outcome)


FLOOD = check("flood", "sh", "-c", "yes 0123456789abcdef | head -c 100000000")


def test_it_caps_a_100mb_output_and_stores_its_start_and_end(sandbox: SandboxExecutor) -> None:
    outcome = drive(sandbox, sandbox_policy(FLOOD), [step("run_check", check_id="flood"), *SURVIVE])
    receipt = outcome.receipt("run_check", "flood")
    data = receipt["data"]
    assert data["exit_code"] == 0 and data["truncated"] is True and data["output_bytes"] == 100_000_000
    assert len(data["output"].encode()) < 51_000  # half of max_output_bytes_per_call, plus the marker
    assert data["output"].startswith("0123456789abcdef\n") and "bytes omitted; stored output (cut): sha256:" in data["output"]
    assert receipt["artifacts"] == [data["output_ref"]]
    # Stored: the first bytes, a notice of the cut and the last bytes, within the
    # per-check cap (sandbox.quota.DiskQuota.output_max_bytes), never all 100 MB.
    assert data["output_cut"] is True and data["output_stored_bytes"] < 8 * MB
    stored = ArtifactStorage().get(data["output_ref"])
    assert len(stored) <= 8 * MB and stored.startswith(b"0123456789abcdef\n")
    assert f"[harness: output cut: the first {data['output_stored_bytes']} of 100000000 bytes".encode() in stored
    line = b"0123456789abcdef\n"
    last = bytes(line[i % len(line)] for i in range(100_000_000 - 1000, 100_000_000))
    assert stored.endswith(last) and "sha256:" + hashlib.sha256(stored).hexdigest() == data["output_ref"]
    feedback_seen = outcome.of_type("evidence_recorded")[0]
    assert feedback_seen.passed is True  # a loud check can still pass; its output is just capped
    assert_survived(outcome)


SLEEPER = check("sleeper", "sh", "-c", "setsid sleep 300 & echo started; sleep 300", timeout=2)


def test_it_kills_a_check_that_sleeps_past_its_timeout(sandbox: SandboxExecutor, module_sandbox: ModuleSandbox) -> None:
    outcome = drive(sandbox, sandbox_policy(SLEEPER), [step("run_check", check_id="sleeper"), *SURVIVE])
    receipt = outcome.receipt("run_check", "sleeper")
    data = receipt["data"]
    assert receipt["status"] == "ok" and receipt["effect"] == "none"
    assert data["timed_out"] is True and data["exit_code"] is None and data["timeout_seconds"] == 2
    assert 2000 <= data["duration_ms"] < 4500
    assert data["output"].startswith("started")
    evidence = outcome.state.evidence[0]
    assert evidence.check_id == "sleeper" and evidence.timed_out is True and evidence.passed is False
    assert len(leftover_processes(module_sandbox)) == 1  # the setsid'd sleep is gone too
    assert_survived(outcome)


ENV = check("env", "env")
ALLOWED_ENV = {"PATH", "HOSTNAME", "HOME", "PWD", "TMPDIR", "XDG_CACHE_HOME"}


def test_it_gives_checks_none_of_the_workers_environment(
    runtime_engine: RuntimeEngine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, db: None
) -> None:
    canary = "canary-" + hashlib.sha256(str(time.time()).encode()).hexdigest()[:16]
    monkeypatch.setenv("HARNESS_CANARY_SECRET", canary)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", canary)
    workspace = example_workspace(tmp_path / "env-run")
    container = start_container("env-run", workspace, runtime_engine.limits(TEST_LIMITS))  # created after the canary is set
    try:
        from runs.artifacts import ArtifactStorage
        from runs.outbox import DatabaseOutbox

        executor = SandboxExecutor("env-run", workspace, container, ArtifactStorage(), DatabaseOutbox(), write_paths=WRITE_PATHS)
        outcome = drive(executor, sandbox_policy(ENV), [step("run_check", check_id="env"), *SURVIVE])
    finally:
        container.remove()
    output = outcome.receipt("run_check", "env")["data"]["output"]
    names = {line.split("=", 1)[0] for line in output.splitlines() if "=" in line}
    assert canary not in output
    assert names <= ALLOWED_ENV, names
    assert_survived(outcome)


class KillSwitch:
    def __init__(self) -> None:
        self.flag = threading.Event()

    def kill_requested(self) -> bool:
        return self.flag.is_set()


def kill_during_long_check(executor: SandboxExecutor) -> tuple[Outcome, float]:
    """Drive a 60 s check, kill it after a second; the outcome and how long after
    the kill the loop returned."""
    switch = KillSwitch()
    killed_at: list[float] = []

    def operator() -> None:
        time.sleep(1.0)
        switch.flag.set()
        killed_at.append(time.monotonic())
        executor.kill()

    thread = threading.Thread(target=operator)
    thread.start()
    long_check = check("long", "sleep", "60", timeout=60)
    outcome = drive(executor, sandbox_policy(long_check), [step("run_check", check_id="long"), *SURVIVE], controls=switch)
    returned_at = time.monotonic()
    thread.join()
    assert outcome.state.outcome == "killed"
    receipt = outcome.receipt("run_check", "long")
    assert receipt["status"] == "unknown" and receipt["data"]["error"] == "the sandbox was killed during the check"
    assert not outcome.state.evidence  # a cut-off check proves nothing
    return outcome, returned_at - killed_at[0]


def test_it_kills_an_execution_in_flight_and_removes_the_container(runtime_engine: RuntimeEngine, tmp_path: Path, db: None) -> None:
    from runs.artifacts import ArtifactStorage
    from runs.outbox import DatabaseOutbox

    workspace = example_workspace(tmp_path / "kill-run")
    container = start_container("kill-run", workspace, runtime_engine.limits(TEST_LIMITS))
    executor = SandboxExecutor("kill-run", workspace, container, ArtifactStorage(), DatabaseOutbox(), write_paths=WRITE_PATHS)
    _, took = kill_during_long_check(executor)
    assert took < 2.0
    with pytest.raises(NotFound):
        runtime_engine.client.containers.get(container.id)


def test_it_stops_the_run_at_once_when_the_engine_is_slow_to_remove_the_container(
    runtime_engine: RuntimeEngine, tmp_path: Path, db: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The kill switch must not wait on the engine: here removal stalls for 5 s
    (as a busy engine's can), and the loop still stops within two seconds."""
    import sandbox.container
    from runs.artifacts import ArtifactStorage
    from runs.outbox import DatabaseOutbox

    class StallingClient:
        class api:  # noqa: N801 - mirrors docker.DockerClient.api
            @staticmethod
            def remove_container(container_id: str, force: bool = False) -> None:
                time.sleep(5)

    workspace = example_workspace(tmp_path / "slow-engine")
    container = start_container("slow-engine", workspace, runtime_engine.limits(TEST_LIMITS))
    executor = SandboxExecutor("slow-engine", workspace, container, ArtifactStorage(), DatabaseOutbox(), write_paths=WRITE_PATHS)
    monkeypatch.setattr(sandbox.container, "new_client", lambda timeout: StallingClient())
    try:
        _, took = kill_during_long_check(executor)
        assert took < 2.0
    finally:
        monkeypatch.undo()
        executor.close()


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
    from runs.artifacts import ArtifactStorage
    from runs.outbox import DatabaseOutbox

    workspace = example_workspace(tmp_path / run_id)
    container = start_container(run_id, workspace, limits)
    return SandboxExecutor(run_id, workspace, container, ArtifactStorage(), DatabaseOutbox(), write_paths=WRITE_PATHS, quota=quota)


def test_it_bounds_what_a_check_writes_by_its_scratch_and_leaves_the_workspace_unchanged(
    runtime_engine: RuntimeEngine, tmp_path: Path, db: None
) -> None:
    """Stronger than the old quota on the workspace (measured every half second while
    the check wrote into it): the check cannot write the workspace at all, and the
    kernel stops it at the scratch tmpfs's size, which is emptied after the check."""
    from sandbox.quota import MB

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

    from runs.artifacts import ArtifactStorage
    from runs.outbox import DatabaseOutbox
    from sandbox import hashing

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
        executor = SandboxExecutor("huge", workspace, container, ArtifactStorage(), DatabaseOutbox(), write_paths=WRITE_PATHS)
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
    from sandbox.quota import MB

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

    from sandbox.quota import MB

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


# -- the bypasses of issue 12: checks that change the workspace, patch headers read two
# ways, file names that forge diff headers ---------------------------------------------

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
    assert [p[0]["field"] for p in problems] == ["args.patch", "args.patch", "args.patch", "args.path"]
    messages = [p[0]["message"] for p in problems]
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


# The sandbox's own seccomp profile (sandbox/seccomp.py): the engine's default lets
# io_uring through; ours answers ENOSYS under runc. gVisor keeps its own rules.
SYSCALLS = check(
    "syscalls",
    "python3",
    "-c",
    "import ctypes, errno, os, subprocess, threading\n"
    "libc = ctypes.CDLL(None, use_errno=True)\n"
    "params = ctypes.create_string_buffer(120)\n"
    "for name, call in [('io_uring_setup', lambda: libc.syscall(425, 8, params)), ('unshare', lambda: libc.unshare(0x10000000))]:\n"
    "    ctypes.set_errno(0)\n"
    "    result = call()\n"
    "    print(name, result, errno.errorcode.get(ctypes.get_errno(), 'none'))\n"
    "worker = threading.Thread(target=print, args=('thread ok',))\n"
    "worker.start(); worker.join()\n"
    "print(subprocess.run(['sh', '-c', 'echo pipe ok | cat'], capture_output=True, text=True).stdout, end='')\n",
)


def test_it_denies_io_uring_and_new_namespaces_and_still_runs_ordinary_checks(
    sandbox: SandboxExecutor, module_sandbox: ModuleSandbox
) -> None:
    from sandbox.seccomp import security_option

    outcome = drive(
        sandbox, sandbox_policy(SYSCALLS), [step("run_check", check_id="syscalls"), step("run_check", check_id="tests"), *SURVIVE]
    )
    output = outcome.receipt("run_check", "syscalls")["data"]["output"].splitlines()
    attrs = module_sandbox.engine.client.api.inspect_container(module_sandbox.container.id)
    assert security_option() in attrs["HostConfig"]["SecurityOpt"]
    if module_sandbox.engine.runtime == "runc":
        assert output[:2] == ["io_uring_setup -1 ENOSYS", "unshare -1 EPERM"], output
    else:
        # gVisor answers a check's calls with its own kernel (io_uring and user
        # namespaces are its own code, never the host's) and leaves the profile aside
        # for exec'd processes; the sandbox itself runs under gVisor's host filter.
        assert output[0].startswith("io_uring_setup ") and output[1].startswith("unshare "), output
        status = Path(f"/proc/{attrs['State']['Pid']}/status").read_text()
        assert "Seccomp:\t2" in status, status
    assert output[2:] == ["thread ok", "pipe ok"]
    # The example's own test suite runs to its verdict (one test fails by design: the
    # demo's bug for the agent to fix).
    suite = outcome.receipt("run_check", "tests")["data"]
    assert suite["exit_code"] == 1 and "1 failed, 4 passed" in suite["output"], suite["output"]
    assert_survived(outcome)
