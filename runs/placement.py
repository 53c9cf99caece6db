"""Where a run's workspace is, for the worker about to drive it (docs/design.md,
Recovery: hosts). A worker's disk is a cache: the record (the run's source, the
commit it was prepared at, its log) is in the database, and any worker can make
the workspace from it.

- A run never prepared yet: this worker prepares it from its source.
- A run this host holds (``Run.host``), with its workspace on this disk: used as it is,
  the common case (a run resumed after a wait or a restart of the host's worker).
- Otherwise (the run's host is gone, or this host's copy was wiped): rebuilt from the
  source at the recorded commit and the writes the log records
  (``sandbox/rebuild.py``), verified at the run's revision, and recorded as a
  ``run_resumed`` event; a rebuild that fails raises ``RebuildFailed`` and the
  caller stops the run ``workspace_lost``.

The worker then holds the run's workspace: ``Run.host`` names its host, under the
worker's lease, and the lease token then is kept in the record and beside the copy,
so a copy left from an earlier stay of the run on this host is never taken for it."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings

from common.redact import MASK
from core import events as ev
from core.contract import WorkspaceSource
from core.fences import Lease
from core.jsonutil import JSON
from runs.models import Event, Run
from runs.persistence.eventlog import LeaseLost, append_events
from runs.persistence.store import load_state
from runs.scheduling import hosts
from sandbox.public import RecordedWrite, RemoteAccess, RunWorkspace, open_workspace, prepare_workspace, rebuild_workspace, recorded_writes

# The events a rebuild reads: the writes, their arguments, and what came around the tools.
# Beside the workspace: the lease token under which this host made it.
PLACED = "placed"
REBUILD_EVENTS = tuple(
    ev.type_name(kind) for kind in (ev.CallAdmitted, ev.ReceiptRecorded, ev.PendingEffectRecorded, ev.EffectReconciled, ev.WorkspaceChanged)
)


def workspace_root(run: Run) -> Path:
    return Path(settings.WORKSPACE_ROOT) / str(run.pk)


def source_of(run: Run) -> WorkspaceSource:
    return WorkspaceSource.model_validate(run.contract["workspace"])


def prepare(run: Run) -> RunWorkspace:
    """The run's workspace on this disk, prepared from its source if it is not there."""
    return prepare_workspace(
        workspace_root(run), source_of(run), Path(settings.BASE_DIR), settings.WORKSPACE_SOURCES, RemoteAccess.from_settings(settings)
    )


@dataclass(frozen=True)
class Placed:
    workspace: RunWorkspace
    rebuilt: bool  # made anew from the record on this worker just now


def place(run: Run, lease_token: int) -> Placed:
    """The run's workspace for the worker holding lease ``lease_token``, prepared, kept
    or rebuilt (the module's docstring). Raises what preparing a source raises
    (WorkspaceSourceError, RemoteError) for a run never prepared, RebuildFailed for
    one whose workspace cannot be rebuilt, LeaseLost once the lease is not this worker's."""
    me = hosts.this_host()
    state = load_state(run)
    if state.base_revision and run.host in ("", me) and (kept := _kept(run)) is not None:
        if run.workspace_source is None:
            _hold(run, lease_token, kept, me)  # a run from before hosts were recorded
        return Placed(kept, rebuilt=False)
    # The first preparation (the caller records the base revision), or a rebuild of what the log says is there.
    workspace = prepare(run) if not state.base_revision else _rebuild(run, lease_token, state.base_revision, state.revision, me)
    _hold(run, lease_token, workspace, me)
    return Placed(workspace, rebuilt=bool(state.base_revision))


def _kept(run: Run) -> RunWorkspace | None:
    """This disk's copy, if it is the one the run's record names: made when this host
    last placed the run (the lease token then, in ``PLACED`` and in the record). A copy
    from an earlier stay (the run went elsewhere and came back, or another host was
    given the same name) is behind, and is not used."""
    root = workspace_root(run)
    kept = open_workspace(root)
    if kept is None or run.workspace_source is None:
        return kept
    try:
        placed = int((root / PLACED).read_text())
    except (OSError, ValueError):
        return None
    return kept if placed == run.workspace_source.get("placed_at_token") else None


def _rebuild(run: Run, lease_token: int, base_revision: str, revision: str, me: str) -> RunWorkspace:
    before = run.host
    commit = (run.workspace_source or {}).get("commit")
    rebuilt = rebuild_workspace(
        workspace_root(run),
        source_of(run),
        str(commit) if commit else None,
        base_revision,
        revision,
        writes_of(run),
        Path(settings.BASE_DIR),
        settings.WORKSPACE_SOURCES,
        RemoteAccess.from_settings(settings),
        mask=MASK,
    )
    why = "this host's copy was gone or behind" if before in ("", me) else f"its host {before} is gone"
    reason = (
        f"workspace rebuilt on {me} ({why}): the source at its base revision and {rebuilt.writes} recorded "
        f"write{'s' if rebuilt.writes != 1 else ''} in {rebuilt.seconds:.3f} s; revision {revision} verified"
    )
    event = ev.RunResumed(run_id=str(run.pk), seq=0, ts=time.time(), reason=reason, revision=revision)
    append_events(str(run.pk), [event], fence=Lease(lease_token))
    return rebuilt.workspace


def writes_of(run: Run) -> list[RecordedWrite]:
    """The writes the run's log records as applied, in order (sandbox/rebuild.py)."""
    rows = Event.objects.filter(run=run, type__in=REBUILD_EVENTS).order_by("seq").iterator()
    return recorded_writes(row.typed() for row in rows)


def fixed_pushes(run: Run) -> dict[str, dict[str, JSON]]:
    """The publishes the run started, by idempotency key, with the effect each fixed
    (``call_admitted``): what a rebuilt clone must know as the run's own commits
    (sandbox.tools.effects.remember_pushes)."""
    effects: dict[str, dict[str, JSON]] = {}
    keys: dict[str, str] = {}
    rows = Event.objects.filter(run=run, type__in=(ev.type_name(ev.CallAdmitted), ev.type_name(ev.CallStarted))).order_by("seq").iterator()
    for event in (row.typed() for row in rows):
        match event:
            case ev.CallAdmitted(call_id=str(call_id), effect=dict(effect)) if effect.get("kind") == "push":
                effects[call_id] = effect
            case ev.CallStarted(call_id=str(call_id), idempotency_key=str(key)):
                keys[call_id] = key
            case _:
                pass
    return {keys[call_id]: effect for call_id, effect in effects.items() if call_id in keys}


def _hold(run: Run, lease_token: int, workspace: RunWorkspace, me: str) -> None:
    """This host holds the run's workspace now; what it was made from is kept so that
    another host can make it again (the commit, whatever its ref says by then)."""
    source = {**workspace.source, "placed_at_token": lease_token}
    (workspace.root / PLACED).write_text(str(lease_token))
    held = Run.objects.filter(pk=run.pk, lease_token=lease_token).update(host=me, workspace_source=source)
    if held != 1:
        raise LeaseLost(f"run {run.pk}: lease token {lease_token} is no longer current")
    run.host, run.workspace_source = me, source
