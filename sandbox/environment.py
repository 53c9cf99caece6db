"""Wiring a run to its sandbox: the workspace under ``WORKSPACE_ROOT/<run_id>/``, the
run's container (limits from the run's policy, never from the model) and the
executor the harness drives."""

from __future__ import annotations

from pathlib import Path

from django.conf import settings

from runs.artifacts import FileArtifactStore
from runs.core.contract import WorkspaceSource
from runs.core.policy import Policy
from runs.environment import Environment
from runs.live_output import LiveOutput
from runs.models import Run
from sandbox.container import ContainerSpec, SandboxContainer
from sandbox.executor import SandboxExecutor
from sandbox.quota import MB, DiskQuota
from sandbox.workspace import RunWorkspace, prepare_workspace


def workspace_root(run: Run) -> Path:
    return Path(settings.WORKSPACE_ROOT) / str(run.pk)


def workspace_for(run: Run) -> RunWorkspace:
    """The run's workspace, prepared from its contract's source on first use."""
    source = WorkspaceSource.model_validate(run.contract["workspace"])
    return prepare_workspace(workspace_root(run), source, Path(settings.BASE_DIR), settings.WORKSPACE_SOURCES)


def prepare_workspace_for(run: Run) -> str:
    """For ``do_create_run(..., revision_of=...)``: prepare and return the revision."""
    return workspace_for(run).revision()


def sandbox_environment(run: Run, policy: Policy) -> Environment:
    workspace = workspace_for(run)
    spec = ContainerSpec.from_limits(policy.sandbox, str(settings.SANDBOX_IMAGE))
    container = SandboxContainer.start(str(run.pk), workspace.dir, spec, scope=settings.SANDBOX_SCOPE)
    executor = SandboxExecutor(
        str(run.pk),
        workspace,
        container,
        FileArtifactStore(),
        Path(settings.OUTBOX_DIR),
        spool_dir=Path(settings.ARTIFACT_ROOT) / "spool",
        quota=DiskQuota(workspace_max_bytes=policy.sandbox.workspace_max_mb * MB, reserve_bytes=settings.HARNESS_DISK_RESERVE_MB * MB),
        live_output=lambda call_id: LiveOutput(str(run.pk), call_id),
    )
    return Environment(
        executor=executor,
        workspace=executor,
        close=executor.close,
        kill=executor.kill,
        repository=workspace.repository_context,
    )
