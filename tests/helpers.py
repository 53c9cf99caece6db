"""Test helpers shared by several feature files: a simulated world for runs driven
through the real Django store."""

from __future__ import annotations

import io
import time
from collections.abc import Mapping, Sequence

from django.contrib.auth.models import User
from django.core.management import call_command

from approvals.models import PolicyVersion
from approvals.policies import current_policy_row
from core import events as ev
from core.environment import Environment
from core.events import Event
from core.fences import RowLock
from core.scenarios import FIXED, call
from core.simulated import MemoryApprovals, SimExecutor, SimWorkspace
from core.state import RunState
from runs.control import kill_requested, killed_by
from runs.models import PublishedPatch, Run
from runs.persistence.outbox import published_patch
from runs.persistence.store import DjangoStore
from runs.services import check_new_run, do_create_run

CONTRACT = {
    "task_id": "calc-fix",
    "objective": "fix the calculator",
    "acceptance_criteria": ["tests pass"],
    "workspace": {"kind": "path", "path": "."},
    "allowed_write_paths": ["src/*"],
    "allowed_tools": ["read_file", "write_file", "run_check", "publish"],
    "verification_targets": ["tests"],
    "limits": {"max_proposals": 20, "max_tool_calls": 20, "max_attempts": 3, "wall_time_seconds": 600, "max_output_bytes_per_call": 65536},
}
# A workspace a new run may start from (HARNESS_WORKSPACE_SOURCES): a re-run is
# checked as any new run is.
STARTABLE = {**CONTRACT, "workspace": {"kind": "path", "path": "examples/orders"}}
SCRIPT = [
    call("read_file", path="src/calc.py"),
    call("write_file", path="src/calc.py", content=FIXED),
    call("run_check", check_id="tests"),
    call("publish", message="reject negative quantities"),
    call("finish", summary="fixed"),
]


class World:
    """The simulated outside world of one run; it outlives any one driver."""

    # Set by the tests that decide approvals in memory (test_durable_state's create).
    approvals: MemoryApprovals

    def __init__(self) -> None:
        self.workspace = SimWorkspace({"src/calc.py": "def total(q):\n    return q\n"})
        self.executor = SimExecutor(self.workspace, check_passes=lambda files, _: "ValueError" in files["src/calc.py"])

    def environment(self) -> Environment:
        return Environment(self.executor, self.workspace)

    def create(
        self,
        actor: User | None = None,
        script: Sequence[object] = SCRIPT,
        contract: Mapping[str, object] = CONTRACT,
        project_id: int | None = None,
    ) -> Run:
        """A run in the project (by default the default project), under its policy."""
        new = check_new_run(contract, {"kind": "scripted", "script": script}, project_id)
        return do_create_run(new, actor, lambda run: self.workspace.revision(), project_id=project_id)


def run_command(*args: str) -> tuple[int, str, str]:
    """A management command as a shell runs it: (exit code, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    code = 0
    try:
        call_command(*args, stdout=out, stderr=err)
    except SystemExit as exc:
        code = int(exc.code or 0)
    return code, out.getvalue(), err.getvalue()


def edited_policy(publish: str | None = None, **fields: object) -> dict[str, object]:
    """The current policy's document (without its version) with ``fields`` replaced
    and, if given, the publish rule's decision changed."""
    document = {key: value for key, value in current_policy_row().document.items() if key != "version"}
    document.update(fields)
    if publish is not None:
        document["rules"] = [{**rule, "decision": publish} if rule["tool"] == "publish" else rule for rule in document["rules"]]
    return document


def new_policy_version(publish: str | None = None, **fields: object) -> PolicyVersion:
    """An admin's edit, written straight to the table (around runs.approval_flow.flow, so
    nothing it makes stale is lapsed until the sweep): the current policy edited as
    ``edited_policy`` says becomes the newest version."""
    version = current_policy_row().version + 1
    document = {**edited_policy(publish, **fields), "version": version}
    return PolicyVersion.objects.create(version=version, document=document, note="edited by a test")


def admitted(run_id: str, n: int) -> ev.CallAdmitted:
    """The gate's admission of a read, the n-th of a run: an event whose decision the
    ledger records."""
    return ev.CallAdmitted(
        run_id=run_id,
        seq=0,
        ts=time.time(),
        call_id=f"c{n}",
        tool="read_file",
        tool_version="1",
        args={"path": f"src/{n}.py"},
        decision="allow",
        rule="reads are free",
        revision="r0",
        policy_version=1,
    )


class Crash(Exception):
    """Stands for the worker process dying: nothing after it is written."""


class CrashingStore(DjangoStore):
    """The real store, dying at its ``crash_at``-th checkpoint (before writing it)."""

    def __init__(self, crash_at: int) -> None:
        super().__init__(RowLock("a test's crashing driver"))
        self.crash_at = crash_at
        self.count = 0

    def checkpoint(self, state: RunState, events: Sequence[Event]) -> None:
        self.count += 1
        if self.count == self.crash_at:
            raise Crash(f"crash at checkpoint {self.count}")
        super().checkpoint(state, events)


class KillFlag:
    """The kill switch as the worker's watchdog sees it (the flags in the database)."""

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id

    def kill_requested(self) -> bool:
        return kill_requested(self.run_id)

    def killed_by(self) -> str:
        return killed_by(self.run_id)


def published_patches(run_id: str) -> dict[str, bytes]:
    """The patches a run published into the outbox, by key, read through the store."""
    keys = PublishedPatch.objects.filter(run_id=run_id).values_list("key", flat=True)
    return {key: patch for key in keys if (patch := published_patch(key)) is not None}
