"""What every sandbox tool shares: the context a call runs in and the result it
returns. A problem the model caused (missing file, patch that does not apply,
symlink) is a result with ``data.error`` and no effect, never an exception."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, Protocol

from common.secret_scan import SecretScanner
from core import events as ev
from core.jsonutil import JSON
from core.ports import ArtifactStore, Call
from sandbox.container.output import OutputListener
from sandbox.container.quota import DiskQuota
from sandbox.container.sandbox_container import SandboxContainer
from sandbox.egress.proxy import MAX_EVENTS
from sandbox.tools.publishing import ReviewLimits
from sandbox.vcs.forges import ChangeRequests
from sandbox.vcs.remote import RemoteTarget
from sandbox.workspace.run_workspace import RunWorkspace

Status = Literal["ok", "transient", "unknown"]
Effect = Literal["none", "applied", "unknown"]
KEY_PATTERN = re.compile(r"^[0-9a-f]{32}$")


@dataclass
class ToolResult:
    status: Status
    effect: Effect
    data: dict[str, JSON]
    artifacts: list[str] = field(default_factory=list)


class FileArtifactSink(Protocol):
    def put_file(self, path: Path, media_type: str) -> str:
        """Store a file's content without reading it into memory; consumes the file."""


class Outbox(Protocol):
    """Where a publish without a remote puts its patch: the key is taken once, by the
    first publisher, wherever it runs (``runs.persistence.outbox.DatabaseOutbox``); the patch's bytes
    are an artifact."""

    def publish(self, key: str, run_id: str, ref: str, size: int) -> bool:
        """Take ``key`` for the patch stored as ``ref``: True for the one publisher that
        took it, False when it was published already."""

    def published(self, key: str) -> bool:
        """Whether ``key`` was published (authoritative: the outbox is the record)."""


class MemoryOutbox:
    """An outbox for one process: the benchmarks, which run the sandbox without Django."""

    def __init__(self) -> None:
        self.keys: dict[str, str] = {}

    def publish(self, key: str, run_id: str, ref: str, size: int) -> bool:
        if key in self.keys:
            return False
        self.keys[key] = ref
        return True

    def published(self, key: str) -> bool:
        return key in self.keys


def run_stored_bytes(artifacts: ArtifactStore) -> int:
    """What the run's artifacts hold so far, from a store that counts them per run
    (``runs.persistence.artifacts.ArtifactStorage`` given a run); 0 from one that does not."""
    counted = getattr(artifacts, "stored_bytes", None)
    return int(counted()) if callable(counted) else 0


@dataclass(frozen=True, kw_only=True)
class ToolSettings:
    """What a run's tools may do and where they reach, fixed for the whole run: built
    once by whoever runs it (runs.runtime composes it from the run's contract, its
    policy and the server's settings) and read by the tools through
    ``ToolContext.settings``; the executor hands it on without reading it."""

    # The workspace paths the contract lets the run write (and publish).
    write_paths: tuple[str, ...]
    # Where a check's output is spooled before it is stored (None: the system's temp).
    spool_dir: Path | None = None
    quota: DiskQuota = DiskQuota()
    # Set for a workspace cloned from a git remote: publish pushes a branch there.
    remote: RemoteTarget | None = None
    # Set when the server has a forge for that remote: open_change_request opens there.
    forge: ChangeRequests | None = None
    # The most of a publish's diff a reviewer is shown.
    review_limits: ReviewLimits = ReviewLimits()
    # The secret scan of a publish's change (the server's values and key).
    scanner: SecretScanner = SecretScanner()
    # The branch the run cloned (None: the remote's default; "": a commit id, which
    # cannot move), and whether the policy makes a push on a moved base stale.
    base_branch: str | None = None
    moved_base: Literal["show", "stale"] = "show"
    # Egress connection events per check call before the rest are only counted.
    egress_max_events: int = MAX_EVENTS


@dataclass
class ToolContext:
    """What a tool's call runs with: the run's stores and settings, and what the
    executor that runs it answers (its containers, whether it was killed, its events)."""

    run_id: str
    workspace: RunWorkspace
    artifacts: ArtifactStore
    outbox: Outbox
    settings: ToolSettings
    # The container a call's check runs in (started, waiting for the engine, when needed).
    container_for: Callable[[Call], SandboxContainer]
    # Given a call id, who watches that call's output while it runs (the live page).
    live_output: Callable[[str], OutputListener] | None
    # True once the run is killed: a long diff stops, and nothing is published after it.
    cancelled: Callable[[], bool]
    # Writes an event for a call while it runs (a check's egress connections).
    notify: Callable[[type[ev.Event], str, dict[str, JSON]], None]


def error_result(message: str, **data: JSON) -> ToolResult:
    return ToolResult("ok", "none", {**data, "error": message})


def infrastructure_result(reason: str, artifacts: list[str] | None = None, *, lasting: bool = False, **data: JSON) -> ToolResult:
    """The sandbox failed, not the call: a transient attempt with no effect, which
    the harness retries and never takes as evidence, unless the failure is
    ``lasting`` (sandbox.container.engine.SandboxUnavailable): then the run stops at once."""
    failure: dict[str, JSON] = {"error": f"the check did not run to its end: {reason}", "infrastructure": reason}
    if lasting:
        failure["infrastructure_lasting"] = True
    return ToolResult("transient", "none", {**data, **failure}, artifacts or [])


def killed_result(**data: JSON) -> ToolResult:
    # Before the effect: nothing was published, so the attempt had no effect.
    return ToolResult("transient", "none", {**data, "error": "the run was killed while its changes were read: nothing was published"})


# A preview cut short by a kill; the run stops before anyone is asked (core.waits).
KILLED_PREVIEW = "# the run was killed while this diff was made\n"


def would_refuse(tool: str, exc: Exception | str) -> str:
    return f"# this {tool} would be refused: {exc}\n"
