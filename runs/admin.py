"""The admin for policy versions, registered here rather than in approvals: its pages
are approvals' (approvals.admin.PolicyVersionAdmin), but saving a version must end the
waits it makes stale at once (docs/design.md, Approvals), and that is runs'
orchestration (runs.approval_flow). Runs sit above approvals, so the layer that owns
the flow registers the admin and hands it the save by subclassing: an import pointing
down, with nothing for approvals to look up. Projects' admin is registered by runs too
(runs.project_admin), for the same reason."""

from __future__ import annotations

import logging
from typing import Any

from django.contrib import admin

from approvals.admin import PolicyVersionAdmin
from approvals.models import PolicyVersion
from core.errors import FieldProblem
from runs import mcp_admin, project_admin  # noqa: F401 - registers projects, their members, their MCP servers and the audit
from runs.approval_flow import save_policy_version
from sandbox.public import ENGINE_ERRORS, RuntimeMissing, check_runtime, shared_client

log = logging.getLogger(__name__)


@admin.register(PolicyVersion)
class PolicyVersionWithRunsAdmin(PolicyVersionAdmin):
    """approvals' policy pages, with what a version means for runs: how many started
    under it, and a save that ends the waits it makes stale."""

    list_display = (*PolicyVersionAdmin.list_display, "run_count")

    def run_count(self, obj: PolicyVersion) -> int:
        return obj.runs.count()

    def store_version(self, row: PolicyVersion, document: dict[str, Any]) -> list[str]:
        return save_policy_version(row, document)

    def engine_problems(self, document: dict[str, Any]) -> list[FieldProblem]:
        runtime = document.get("sandbox", {}).get("runtime", "runc")
        try:
            check_runtime(shared_client(), runtime)
        except RuntimeMissing as exc:
            return [FieldProblem("sandbox.runtime", exc.reason)]
        except ENGINE_ERRORS as exc:
            # No engine to ask now: the save goes ahead; a run names a missing runtime when it starts.
            log.warning("could not ask the sandbox engine for runtime %r (%s)", runtime, exc)
        return []
