"""The file tools, on the host through ``fileops`` (never in the container, which
mounts the workspace read-only), and what a reviewer is shown of a write."""

from __future__ import annotations

from collections.abc import Mapping

from core.jsonutil import JSON
from core.ports import Call, RevisionMismatch
from sandbox.tools.context import KILLED_PREVIEW, ToolContext, ToolResult, error_result, would_refuse
from sandbox.workspace import fileops, patches
from sandbox.workspace.run_workspace import RunWorkspace


def list_files(ctx: ToolContext, call: Call) -> ToolResult:
    data = fileops.list_files(ctx.workspace.dir, str(call.args["path"]), int(call.args["max_entries"]))
    return ToolResult("ok", "none", dict(data))


def read_file(ctx: ToolContext, call: Call) -> ToolResult:
    data = fileops.read_file(
        ctx.workspace.dir,
        str(call.args["path"]),
        int(call.args["offset"]),
        int(call.args["limit"]),
        max_bytes=max(256, call.max_output_bytes // 2),
    )
    return ToolResult("ok", "none", data)


def search(ctx: ToolContext, call: Call) -> ToolResult:
    data = fileops.search(ctx.workspace.dir, str(call.args["pattern"]), str(call.args["path"]), int(call.args["max_matches"]))
    return ToolResult("ok", "none", data)


def write_file(ctx: ToolContext, call: Call) -> ToolResult:
    data = ctx.workspace.write_file(str(call.args["path"]), str(call.args["content"]))
    return ToolResult("ok", "none" if data["unchanged"] else "applied", data)


def preview_write_file(ctx: ToolContext, args: Mapping[str, JSON]) -> str:
    """The file's change as a unified diff against its current content."""
    path = str(args["path"])
    try:
        current = fileops.read_bytes(ctx.workspace.dir, path)
        new = str(args["content"])
        if current is not None and fileops.is_binary(current):
            return f"# {path} is a binary file; write_file replaces it with {len(new.encode())} bytes of text\n"
        old = None if current is None else fileops.decode(current)
        return patches.unified_diff(path, old, new, cancelled=ctx.cancelled)
    except (fileops.FileRefused, patches.PatchRefused) as exc:
        return would_refuse("write_file", exc)
    except patches.DiffCancelled:
        return KILLED_PREVIEW


# What a request keeps of the files its diff changes, all together: past it the
# files that do not fit are left out, and their hunks are shown without expanding.
SOURCES_MAX_BYTES = 1_000_000


def _bounded(texts: Mapping[str, str | None]) -> dict[str, str]:
    """The texts that fit, in order; one that is not storable text (a NUL, bytes that
    are not UTF-8) is left out too."""
    kept: dict[str, str] = {}
    left = SOURCES_MAX_BYTES
    for path, text in texts.items():
        if text is None or "\x00" in text:
            continue
        try:
            size = len(text.encode())
        except UnicodeEncodeError:
            continue
        if size <= left:
            kept[path] = text
            left -= size
    return kept


def sources_write_file(ctx: ToolContext, args: Mapping[str, JSON]) -> dict[str, str]:
    """The file as it is now (the old side of ``preview_write_file``'s diff)."""
    path = str(args["path"])
    try:
        current = fileops.read_bytes(ctx.workspace.dir, path)
    except fileops.FileRefused:
        return {}
    if current is None or fileops.is_binary(current):
        return {}
    return _bounded({path: fileops.decode(current)})


def sources_apply_patch(ctx: ToolContext, args: Mapping[str, JSON]) -> dict[str, str]:
    """Each file the patch changes as it is now, read as the applier plans it."""
    try:
        planned = fileops.plan_patch(ctx.workspace.dir, str(args["patch"]))
    except (fileops.FileRefused, patches.PatchRefused):
        return {}
    return _bounded({c.path: c.old for c in planned})


def sources_changed(ctx: ToolContext, args: Mapping[str, JSON]) -> dict[str, str]:
    """The base side of each text file the workspace changed: what a publish's diff
    is made against (``RunWorkspace.diff``)."""
    try:
        changes = ctx.workspace.changes()
    except (fileops.FileRefused, RevisionMismatch):
        return {}
    texts = {c.path: fileops.decode(c.old) for c in changes if c.old_kind == "file" and c.old is not None and not fileops.is_binary(c.old)}
    return _bounded(texts)


def apply_patch(ctx: ToolContext, call: Call) -> ToolResult:
    try:
        data = ctx.workspace.apply_patch(str(call.args["patch"]))
    except patches.PatchRefused as exc:
        return error_result(f"the patch was not applied (nothing was written): {exc}")
    return ToolResult("ok", "applied", data)


def preview_apply_patch(ctx: ToolContext, args: Mapping[str, JSON]) -> str:
    """What the patch would change, as the applier plans it, against the current content."""
    try:
        planned = fileops.plan_patch(ctx.workspace.dir, str(args["patch"]))
        return "".join(patches.unified_diff(c.path, c.old, c.new, cancelled=ctx.cancelled) for c in planned)
    except (fileops.FileRefused, patches.PatchRefused) as exc:
        return would_refuse("apply_patch", exc)
    except patches.DiffCancelled:
        return KILLED_PREVIEW


def replay(workspace: RunWorkspace, tool: str, args: Mapping[str, JSON]) -> None:
    """Write again what a run's log records a write tool as having written, through
    the workspace's own writers, as ``write_file`` and ``apply_patch`` above did the first
    time (sandbox/rebuild.py). FileRefused or PatchRefused when it cannot be applied."""
    if tool == "write_file":
        workspace.write_file(str(args["path"]), str(args["content"]))
    elif tool == "apply_patch":
        workspace.apply_patch(str(args["patch"]))
    else:
        raise fileops.FileRefused(f"{tool} is not a workspace write the harness can replay")


# The tools whose receipts ``replay`` can write again: every tool that writes the workspace.
REPLAYABLE = frozenset({"write_file", "apply_patch"})
