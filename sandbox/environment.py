"""Wiring a run to its sandbox: the workspace under ``WORKSPACE_ROOT/<run_id>/``, the
run's container (limits from the run's policy, never from the model) and the
executor the harness drives."""

from __future__ import annotations

import logging
from pathlib import Path

from django.conf import settings

from approvals.models import ApprovalRequest
from runs.artifacts import FileArtifactStore
from runs.core.contract import WorkspaceSource
from runs.core.policy import Policy
from runs.environment import Environment
from runs.eventlog import append_events
from runs.live_output import LiveOutput
from runs.models import Run
from sandbox.container import ContainerSpec, SandboxContainer
from sandbox.engine import SandboxUnavailable
from sandbox.executor import SandboxExecutor
from sandbox.preparation import prepare_workspace
from sandbox.quota import MB, DiskQuota
from sandbox.remote import RemoteAccess, RemoteTarget
from sandbox.sources import check_source
from sandbox.workspace import RunWorkspace

log = logging.getLogger(__name__)


def workspace_root(run: Run) -> Path:
    return Path(settings.WORKSPACE_ROOT) / str(run.pk)


def workspace_for(run: Run) -> RunWorkspace:
    """The run's workspace, prepared from its contract's source on first use."""
    source = WorkspaceSource.model_validate(run.contract["workspace"])
    return prepare_workspace(
        workspace_root(run), source, Path(settings.BASE_DIR), settings.WORKSPACE_SOURCES, RemoteAccess.from_settings(settings)
    )


def remote_target(run: Run, workspace: RunWorkspace) -> RemoteTarget | None:
    """Where publish pushes, for a workspace cloned from a git remote: a branch fixed
    per run (``harness/<task_id>-<run id prefix>``), on the commit it was cloned at."""
    source = workspace.source
    if not isinstance(source.get("url"), str):
        return None
    run_id = str(run.pk)

    def approval_trailers(call_id: str) -> list[tuple[str, str]]:
        granted = (
            ApprovalRequest.objects.filter(
                run_id=run.pk, call_id=call_id, status__in=[ApprovalRequest.Status.GRANTED, ApprovalRequest.Status.CONSUMED]
            )
            .select_related("decided_by")
            .order_by("-decided_at")
            .first()
        )
        if granted is None:
            return []
        trailers = [("Harness-Approval", str(granted.pk))]
        if granted.decided_by is not None:
            trailers.append(("Harness-Reviewer", granted.decided_by.get_username()))
        return trailers

    return RemoteTarget(
        url=str(source["url"]),
        base=str(source["commit"]),
        branch=f"harness/{run.contract['task_id']}-{run_id[:8]}",
        git_dir=workspace.remote_git,
        access=RemoteAccess.from_settings(settings),
        approval_trailers=approval_trailers,
    )


def prepare_workspace_for(run: Run) -> str:
    """For ``do_create_run(..., revision_of=...)``: prepare and return the revision."""
    return workspace_for(run).revision()


def check_workspace_for(run: Run) -> str:
    """For ``do_create_run(..., revision_of=...)`` in a process that must not prepare
    workspaces (the web server: preparing hands the files to the sandbox's uid, which
    needs root). Refuses a bad source now; the revision is "" until the worker that
    first drives the run prepares the workspace (runs.runtime.advance)."""
    source = WorkspaceSource.model_validate(run.contract["workspace"])
    check_source(source, Path(settings.BASE_DIR), settings.WORKSPACE_SOURCES, settings.GIT_ALLOWED_REMOTES)
    return ""


def sandbox_environment(run: Run, policy: Policy) -> Environment:
    workspace = workspace_for(run)
    run_id = str(run.pk)
    spec = ContainerSpec.from_limits(policy.sandbox, str(settings.SANDBOX_IMAGE))
    try:
        container: SandboxContainer | None = SandboxContainer.start(run_id, workspace.dir, spec, scope=settings.SANDBOX_SCOPE)
    except SandboxUnavailable as exc:
        # The run goes on with what needs no sandbox; its first check starts the
        # container, waiting for the engine if need be.
        log.warning("run %s: no sandbox container yet (%s)", run_id, exc.reason)
        container = None
    executor = SandboxExecutor(
        run_id,
        workspace,
        container,
        FileArtifactStore(),
        Path(settings.OUTBOX_DIR),
        write_paths=run.contract["allowed_write_paths"],
        spool_dir=Path(settings.ARTIFACT_ROOT) / "spool",
        quota=DiskQuota(workspace_max_bytes=policy.sandbox.workspace_max_mb * MB, reserve_bytes=settings.HARNESS_DISK_RESERVE_MB * MB),
        spec=spec,
        scope=settings.SANDBOX_SCOPE,
        engine_wait_seconds=settings.SANDBOX_ENGINE_WAIT_SECONDS,
        notify=lambda event: append_events(run_id, [event]),
        remote=remote_target(run, workspace),
        live_output=lambda call_id: LiveOutput(run_id, call_id),
    )
    return Environment(
        executor=executor,
        workspace=executor,
        close=executor.close,
        kill=executor.kill,
        repository=workspace.repository_context,
    )
