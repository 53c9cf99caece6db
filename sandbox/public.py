"""What the rest of Harness may use of the sandbox (.importlinter: no other package
imports a module inside it). The runs app builds a run's executor from these parts
(runs.runtime), places and rebuilds its workspace, checks sources, forges and bases,
and sweeps containers; the settings and the admin check URLs against the allowlist
and the engine's runtimes; an outside agent's driver (issue 41) starts, runs, kills
and closes the run's agent container; the worker's shutdown drains the pool of
started containers. Nothing here loads the MCP SDK: a run that talks to a
server loads it then (sandbox/mcp)."""

from __future__ import annotations

from sandbox.agent.container import AGENT_IMAGE, AGENT_SPEC, HOME_DIR, AgentContainer, AgentResult, Gateway
from sandbox.agent.presets import (
    CONNECTED,
    PRESETS,
    Launch,
    ModelProxy,
    Preset,
    RunEndpoints,
    launch,
    mcp_report,
    parse_version,
    version_argv,
)
from sandbox.container.client import shared_client, use_engine_host
from sandbox.container.engine import ENGINE_ERRORS
from sandbox.container.orphans import containers_by_run, remove_containers
from sandbox.container.output import OutputCapture
from sandbox.container.pool import configure as configure_pool
from sandbox.container.pool import drain as drain_pool
from sandbox.container.quota import MB, DiskQuota
from sandbox.container.spec import ContainerSpec, RuntimeMissing, check_runtime
from sandbox.executor import SandboxExecutor
from sandbox.mcp.config import McpServerConfig
from sandbox.rebuild import RebuildFailed, RecordedWrite, rebuild_workspace, recorded_writes
from sandbox.tools.context import ToolSettings
from sandbox.tools.effects import remember_pushes
from sandbox.tools.mcp import McpTools
from sandbox.tools.publishing import ReviewLimits
from sandbox.vcs.allowlist import UnsafeURL, admitted, allowlist
from sandbox.vcs.base_check import BaseMove, check_base
from sandbox.vcs.forges import ChangeRequests, ForgeAccess
from sandbox.vcs.remote import HEX_REF, RemoteAccess, RemoteError, RemoteTarget
from sandbox.workspace.preparation import open_workspace, prepare_workspace
from sandbox.workspace.run_workspace import RunWorkspace
from sandbox.workspace.sources import WorkspaceSourceError, check_narrowed, check_source

__all__ = [
    "AGENT_IMAGE",
    "AGENT_SPEC",
    "HOME_DIR",
    "CONNECTED",
    "PRESETS",
    "Launch",
    "ModelProxy",
    "Preset",
    "RunEndpoints",
    "launch",
    "mcp_report",
    "parse_version",
    "version_argv",
    "ENGINE_ERRORS",
    "HEX_REF",
    "MB",
    "AgentContainer",
    "AgentResult",
    "BaseMove",
    "ChangeRequests",
    "ContainerSpec",
    "DiskQuota",
    "ForgeAccess",
    "Gateway",
    "McpServerConfig",
    "McpTools",
    "OutputCapture",
    "RebuildFailed",
    "RecordedWrite",
    "RemoteAccess",
    "RemoteError",
    "RemoteTarget",
    "ReviewLimits",
    "RunWorkspace",
    "RuntimeMissing",
    "SandboxExecutor",
    "ToolSettings",
    "UnsafeURL",
    "WorkspaceSourceError",
    "admitted",
    "allowlist",
    "check_base",
    "check_narrowed",
    "check_runtime",
    "check_source",
    "configure_pool",
    "drain_pool",
    "containers_by_run",
    "open_workspace",
    "prepare_workspace",
    "rebuild_workspace",
    "recorded_writes",
    "remember_pushes",
    "remove_containers",
    "shared_client",
    "use_engine_host",
]
