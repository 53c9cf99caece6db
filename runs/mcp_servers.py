"""A run's MCP servers (docs/design.md, Outside tools): its project's enabled rows, each
URL checked against the server's allowlist (HARNESS_MCP_ALLOWED_URLS) when the row is
saved and again whenever a worker picks the run up, so a list narrowed since leaves
the server out."""

from __future__ import annotations

import logging
import os

from django.conf import settings

from projects.models import McpServer
from sandbox.public import McpServerConfig, McpTools, UnsafeURL, admitted, allowlist

log = logging.getLogger(__name__)


def check_mcp_url(url: str) -> None:
    """Raise UnsafeURL naming the problem unless ``url`` is on the allowlist."""
    if not admitted(url, allowlist(settings.MCP_ALLOWED_URLS)):
        raise UnsafeURL(f"{url} is not on HARNESS_MCP_ALLOWED_URLS")


def server_config(row: McpServer) -> McpServerConfig:
    return McpServerConfig(
        name=row.name,
        url=row.url,
        command=tuple(str(part) for part in row.command),
        credential_env=row.credential_env,
        idempotency_arg=row.idempotency_arg or None,
        lookup_tool=row.lookup_tool or None,
        timeout_seconds=float(row.timeout_seconds),
        max_response_bytes=row.max_response_mb * 2**20,
    )


def mcp_tools_for(project_id: int) -> McpTools:
    configs = []
    for row in McpServer.objects.filter(project_id=project_id, enabled=True):
        try:
            if not row.command:
                check_mcp_url(row.url)
        except UnsafeURL as exc:
            log.warning("MCP server %s of project %s left out: %s", row.name, project_id, exc)
            continue
        configs.append(server_config(row))
    # The worker's own environment: the tokens are read there by name at each
    # connection, and nowhere else (never the sandbox's, never the run's record).
    return McpTools(configs, os.environ)
