"""Rebuilding a run's workspace on a worker that does not have it (docs/design.md,
Recovery: a host that is gone).

Only the harness's own file tools write a workspace: checks see it through a
read-only mount their container proves before every execution. So a workspace is
its source at the commit the run was first prepared at, plus the writes the run's
log records as applied, in log order: the receipts of ``write_file`` and
``apply_patch`` that wrote (``receipt_recorded``, valid, with ``wrote``), and the
writes of unknown outcome later found applied (``effect_reconciled``), and last,
only if the workspace is not yet at the run's revision, a write of unknown outcome
still unresolved (the revision its receipt recorded may include it). Each is
applied again through the workspace's own writers (``sandbox.tools.files.replay``), and the
revision after each must be the one the log recorded after it; the rebuilt
workspace must then be at the run's revision. What proves it is the run's tree: the
base revision proven as preparation made it (a full walk, or a git checkout adopting
the commit's own tree objects, ``sandbox/workspace/checkout.py``), then every replayed
write's paths hashed from the disk into the maintained revision, which must match the
log's after each write and the run's at the end. The tree is not walked again here
(at 10,000 files that walk was half of a rebuild): as after any preparation, the full
walk runs before publish is previewed or ships and before the run completes.
Anything else (a source
that no longer gives the base revision, a source that cannot be read, a write that
does not apply or lands elsewhere, a change the log says came around the tools)
raises ``RebuildFailed`` saying which, and the run stops: a run never goes on from a
workspace that is not the one its record describes."""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from core import events as ev
from core.contract import WorkspaceSource
from core.jsonutil import JSON
from core.ports import RevisionMismatch
from sandbox.tools.files import REPLAYABLE, replay
from sandbox.vcs.remote import RemoteAccess, RemoteError
from sandbox.workspace import fileops, patches
from sandbox.workspace.preparation import prepare_workspace
from sandbox.workspace.run_workspace import RunWorkspace
from sandbox.workspace.sources import WorkspaceSourceError


class RebuildFailed(Exception):
    """The workspace cannot be rebuilt as the run's record describes it."""


@dataclass(frozen=True)
class RecordedWrite:
    seq: int  # of the event that records it as applied
    call_id: str
    tool: str
    args: dict[str, JSON]
    # The workspace's revision after it, as the log records ("" for an unresolved one).
    revision: str
    # "applied": its receipt says it wrote. "reconciled": of unknown outcome, found
    # applied by a later look, which read the workspace at ``revision``: one already
    # there is not written again. "unresolved": of unknown outcome, never looked up.
    kind: Literal["applied", "reconciled", "unresolved"] = "applied"


@dataclass(frozen=True)
class Rebuilt:
    workspace: RunWorkspace
    writes: int
    seconds: float


def recorded_writes(events: Iterable[ev.AnyEvent]) -> list[RecordedWrite]:
    """The workspace writes a run's log (in seq order) records as applied, in order."""
    args: dict[str, tuple[str, dict[str, JSON]]] = {}
    pending: dict[str, tuple[int, str, dict[str, JSON]]] = {}
    writes: list[RecordedWrite] = []
    for event in events:
        match event:
            case ev.CallAdmitted() if event.call_id is not None and event.tool in REPLAYABLE:
                args[event.call_id] = (event.tool, dict(event.args))
            case ev.ReceiptRecorded() if event.valid and event.wrote and event.call_id is not None:
                tool, called = _arguments(args, event.call_id, event.seq)
                writes.append(RecordedWrite(event.seq, event.call_id, tool, called, event.harness_revision))
            case ev.PendingEffectRecorded() if event.kind == "workspace" and event.call_id is not None:
                pending[event.call_id] = (event.seq, event.tool, dict(event.args))
            case ev.EffectReconciled() if event.call_id in pending:
                assert event.call_id is not None
                _, tool, called = pending.pop(event.call_id)
                if event.applied and event.revision is not None:
                    writes.append(RecordedWrite(event.seq, event.call_id, tool, called, event.revision, "reconciled"))
            case ev.WorkspaceChanged():
                raise RebuildFailed(
                    f"the log records a change of the workspace that came around the harness's tools (event {event.seq}: "
                    f"{event.old_revision} to {event.revision}); what it changed is not on the record"
                )
            case _:
                pass
    # Writes are blocked while one is unresolved, so these come last.
    writes += [RecordedWrite(seq, call_id, tool, called, "", "unresolved") for call_id, (seq, tool, called) in pending.items()]
    return writes


def _arguments(args: dict[str, tuple[str, dict[str, JSON]]], call_id: str, seq: int) -> tuple[str, dict[str, JSON]]:
    if call_id not in args:
        raise RebuildFailed(f"the log records a write by {call_id} (event {seq}) but not the call's arguments")
    return args[call_id]


def rebuild_workspace(
    root: Path,
    source: WorkspaceSource,
    commit: str | None,
    base_revision: str,
    revision: str,
    writes: Sequence[RecordedWrite],
    base_dir: Path,
    allowed_roots: Sequence[Path],
    remotes: RemoteAccess | None = None,
    mask: str | None = None,
) -> Rebuilt:
    """The run's workspace under ``root``, made anew from ``source`` (at ``commit`` for
    a git source or remote) and ``writes``, verified at ``revision``; RebuildFailed
    otherwise; ``mask`` is what stored run data holds in place of a secret, named when
    a write with it cannot be written again. Whatever ``root`` held (a copy from an earlier stay of the run on this
    host, now behind) is discarded first: only what the record describes is used."""
    started = time.monotonic()
    if root.exists():
        shutil.rmtree(root)

    def replay_all(workspace: RunWorkspace) -> None:
        base = workspace.revision()
        if base != base_revision:
            raise RebuildFailed(
                f"the source {_shown(source, commit)} gives revision {base}, not the run's base revision {base_revision}: "
                "it changed since the run started"
            )
        for write in writes:
            if write.kind == "unresolved" and workspace.revision() == revision:
                break
            if write.kind == "reconciled" and workspace.revision() == write.revision:
                continue
            _replay_one(workspace, write, mask)
        # The maintained revision, not a full walk: the base was proven as preparation
        # made it (walked, or the commit's own trees), each write's paths were hashed
        # from the disk after it and matched the revision the log recorded, and nothing
        # else writes the staging directory. The walk that judges runs before publish
        # and before the run completes, as after any preparation.
        try:
            final = workspace.revision()
        except RevisionMismatch as exc:
            raise RebuildFailed(f"the rebuilt workspace fails its verification: {exc}") from None
        if final != revision:
            raise RebuildFailed(f"the rebuilt workspace is at revision {final}, the run's record says {revision}")

    try:
        workspace = prepare_workspace(root, source, base_dir, allowed_roots, remotes, commit=commit, before_ready=replay_all)
    except (WorkspaceSourceError, RemoteError) as exc:
        raise RebuildFailed(f"the source {_shown(source, commit)} cannot be read: {_problem(exc)}") from None
    return Rebuilt(workspace, len(writes), time.monotonic() - started)


def _replay_one(workspace: RunWorkspace, write: RecordedWrite, mask: str | None) -> None:
    try:
        replay(workspace, write.tool, write.args)
    except (fileops.FileRefused, patches.PatchRefused) as exc:
        raise RebuildFailed(f"{write.call_id}'s {write.tool} (event {write.seq}) cannot be written again: {exc}") from None
    found = workspace.revision()
    if write.kind != "unresolved" and found != write.revision:
        # Stored run data is masked: a write that held a secret cannot be written
        # again from the log.
        why = " (its arguments were stored with a secret masked)" if mask and mask in str(write.args) else ""
        raise RebuildFailed(
            f"{write.call_id}'s {write.tool} (event {write.seq}) written again gives revision {found}, "
            f"the log recorded {write.revision}{why}"
        )


def _shown(source: WorkspaceSource, commit: str | None) -> str:
    where = source.url or source.path or "?"
    return f"{where} at {commit}" if commit else f"{source.kind} {where}"


def _problem(exc: WorkspaceSourceError | RemoteError) -> str:
    return "; ".join(problem.message for problem in exc.problems) or str(exc)
