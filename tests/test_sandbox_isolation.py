"""Threats against the sandbox's isolation (tests/sandbox_threats.py): outbound network,
writes outside the workspace and the allowed paths, `..` and symlink escapes, the
worker's environment, and the system calls the seccomp profile denies."""

from __future__ import annotations

import hashlib
import os
import time
from pathlib import Path

import pytest

from sandbox.executor import SandboxExecutor
from sandbox.tools.context import ToolSettings
from tests.fixtures_runtimes import RuntimeEngine
from tests.fixtures_sandbox import (
    SURVIVE,
    TEST_LIMITS,
    WRITE_PATHS,
    ModuleSandbox,
    drive,
    example_workspace,
    sandbox_policy,
    start_container,
    step,
)
from tests.sandbox_threats import assert_survived, check

pytestmark = [pytest.mark.docker]


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
    assert [r.problems[0].field for r in refusals] == ["args.path", "args.path", "args.path", "args.patch"]
    assert "'..'" in refusals[0].problems[0].message
    assert "relative" in refusals[1].problems[0].message
    assert "outside allowed_write_paths" in refusals[2].problems[0].message
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
    assert outcome.of_type("invalid_input")[0].problems[0].message.endswith("must not contain '..'")
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
        from runs.persistence.artifacts import ArtifactStorage
        from runs.persistence.outbox import DatabaseOutbox

        executor = SandboxExecutor(
            "env-run", workspace, container, ArtifactStorage(), DatabaseOutbox(), ToolSettings(write_paths=WRITE_PATHS)
        )
        outcome = drive(executor, sandbox_policy(ENV), [step("run_check", check_id="env"), *SURVIVE])
    finally:
        container.remove()
    output = outcome.receipt("run_check", "env")["data"]["output"]
    names = {line.split("=", 1)[0] for line in output.splitlines() if "=" in line}
    assert canary not in output
    assert names <= ALLOWED_ENV, names
    assert_survived(outcome)


# The sandbox's own seccomp profile (sandbox/container/seccomp.py): the engine's default lets
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
    from sandbox.container.seccomp import security_option

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
