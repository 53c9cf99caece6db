"""The tool implementations behind ``SandboxExecutor``: ``TOOLS`` holds, for each
tool of the registry (``core.tools``), its handler and, beside it, what a reviewer is
shown before granting it and how an external effect of unknown outcome is found
again. The handlers live by kind: file tools (``sandbox.tools.files``), checks
(``sandbox.tools.check``) and external effects (``sandbox.tools.effects``), over the
context and result they share (``sandbox.tools.context``)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from core.effects import Plan
from core.jsonutil import JSON
from core.ports import Call, Reconciliation
from core.state import PendingEffect
from sandbox.tools.check import run_check
from sandbox.tools.context import ToolContext, ToolResult
from sandbox.tools.effects import (
    find_change_request,
    find_publish,
    lookup_publish,
    open_change_request,
    plan_change_request,
    plan_publish,
    publish,
)
from sandbox.tools.files import (
    apply_patch,
    list_files,
    preview_apply_patch,
    preview_write_file,
    read_file,
    search,
    sources_apply_patch,
    sources_changed,
    sources_write_file,
    write_file,
)


@dataclass(frozen=True)
class SandboxTool:
    """What the sandbox does for one tool of the registry. ``preview`` shows a reviewer
    what granting a workspace write would do (a call that would be refused says so),
    and ``sources`` the files it changes as they are now, to read around its hunks;
    ``plan`` fixes an external call's effect and what a reviewer is shown of it
    (core.effects); ``reconcile`` finds whether an external effect of unknown
    outcome happened."""

    run: Callable[[ToolContext, Call], ToolResult]
    preview: Callable[[ToolContext, Mapping[str, JSON]], str] | None = None
    reconcile: Callable[[ToolContext, PendingEffect], Reconciliation] | None = None
    plan: Callable[[ToolContext, Mapping[str, JSON], str, float], Plan] | None = None
    sources: Callable[[ToolContext, Mapping[str, JSON]], dict[str, str]] | None = None


TOOLS: dict[str, SandboxTool] = {
    "list_files": SandboxTool(list_files),
    "read_file": SandboxTool(read_file),
    "search": SandboxTool(search),
    "write_file": SandboxTool(write_file, preview_write_file, sources=sources_write_file),
    "apply_patch": SandboxTool(apply_patch, preview_apply_patch, sources=sources_apply_patch),
    "run_check": SandboxTool(run_check),
    "publish": SandboxTool(publish, reconcile=find_publish, plan=plan_publish, sources=sources_changed),
    "lookup_publish": SandboxTool(lookup_publish),
    "open_change_request": SandboxTool(open_change_request, reconcile=find_change_request, plan=plan_change_request),
}
