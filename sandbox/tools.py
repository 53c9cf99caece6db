"""The tool implementations behind ``SandboxExecutor``: file tools on the host (via
``fileops``), checks in the run's container, publishing into the outbox.

Each returns a ``ToolResult``; a problem the model caused (missing file, patch that
does not apply, symlink) is a result with ``data.error`` and no effect, never an
exception. ``TOOLS`` holds, for each tool of the registry (``core.tools``), its
handler and, beside it, what a reviewer is shown before granting it and how an
external effect of unknown outcome is found again."""

from __future__ import annotations

import os
import re
import secrets
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Literal, Protocol, TypeVar

from core.effects import ChangeRequestEffect, OutboxEffect, Plan, PushEffect, RefusedEffect, parse_effect
from core.jsonutil import JSON, sha256_bytes
from core.policy import CheckDef
from core.ports import ArtifactStore, Call, Reconciliation
from core.state import PendingEffect
from sandbox import fileops, patches
from sandbox.container import SandboxContainer
from sandbox.engine import SandboxUnavailable
from sandbox.execution import ExecResult
from sandbox.forges import ChangeRequests, ForgeError, describe_change_request
from sandbox.output_capture import OutputCapture, OutputListener
from sandbox.publishing import Publication, PublishRefused, ReviewLimits, publication
from sandbox.quota import WATCH_SECONDS, DiskQuota, QuotaProblem
from sandbox.remote import EffectDrift, PushConflict, RemoteError, RemoteTarget, describe_push
from sandbox.workspace import RunWorkspace

Status = Literal["ok", "transient", "unknown"]
Effect = Literal["none", "applied", "unknown"]
KEY_PATTERN = re.compile(r"^[0-9a-f]{32}$")
FixedEffect = TypeVar("FixedEffect", OutboxEffect, PushEffect, ChangeRequestEffect)


@dataclass
class ToolResult:
    status: Status
    effect: Effect
    data: dict[str, JSON]
    artifacts: list[str] = field(default_factory=list)


class FileArtifactSink(Protocol):
    def put_file(self, path: Path, media_type: str) -> str:
        """Store a file's content without reading it into memory; consumes the file."""


def run_stored_bytes(artifacts: ArtifactStore) -> int:
    """What the run's artifacts hold so far, from a store that counts them per run
    (``runs.artifacts.FileArtifactStore`` given a run); 0 from one that does not."""
    counted = getattr(artifacts, "stored_bytes", None)
    return int(counted()) if callable(counted) else 0


@dataclass
class ToolContext:
    run_id: str
    workspace: RunWorkspace
    artifacts: ArtifactStore
    outbox: Path
    # The container a call's check runs in (started, waiting for the engine, when needed).
    container_for: Callable[[Call], SandboxContainer]
    write_paths: tuple[str, ...]
    spool_dir: Path | None = None
    quota: DiskQuota = DiskQuota()
    # Set for a workspace cloned from a git remote: publish pushes a branch there.
    remote: RemoteTarget | None = None
    # Set when the server has a forge for that remote: open_change_request opens there.
    forge: ChangeRequests | None = None
    # Given a call id, who watches that call's output while it runs (the live page).
    live_output: Callable[[str], OutputListener] | None = None
    # True once the run is killed: a long diff stops, and nothing is published after it.
    cancelled: Callable[[], bool] | None = None
    # The most of a publish's diff a reviewer is shown.
    review_limits: ReviewLimits = ReviewLimits()


def _error(message: str, **data: JSON) -> ToolResult:
    return ToolResult("ok", "none", {**data, "error": message})


def _infrastructure(reason: str, artifacts: list[str] | None = None, **data: JSON) -> ToolResult:
    """The sandbox failed, not the call: a transient attempt with no effect, which
    the harness retries and never takes as evidence."""
    return ToolResult(
        "transient", "none", {**data, "error": f"the check did not run to its end: {reason}", "infrastructure": reason}, artifacts or []
    )


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


def _killed(**data: JSON) -> ToolResult:
    # Before the effect: nothing was published, so the attempt had no effect.
    return ToolResult("transient", "none", {**data, "error": "the run was killed while its changes were read: nothing was published"})


# A preview cut short by a kill; the run stops before anyone is asked (core.waits).
KILLED_PREVIEW = "# the run was killed while this diff was made\n"


def _would_refuse(tool: str, exc: Exception | str) -> str:
    return f"# this {tool} would be refused: {exc}\n"


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
        return _would_refuse("write_file", exc)
    except patches.DiffCancelled:
        return KILLED_PREVIEW


def apply_patch(ctx: ToolContext, call: Call) -> ToolResult:
    try:
        data = ctx.workspace.apply_patch(str(call.args["patch"]))
    except patches.PatchRefused as exc:
        return _error(f"the patch was not applied (nothing was written): {exc}")
    return ToolResult("ok", "applied", data)


def preview_apply_patch(ctx: ToolContext, args: Mapping[str, JSON]) -> str:
    """What the patch would change, as the applier plans it, against the current content."""
    try:
        planned = fileops.plan_patch(ctx.workspace.dir, str(args["patch"]))
        return "".join(patches.unified_diff(c.path, c.old, c.new, cancelled=ctx.cancelled) for c in planned)
    except (fileops.FileRefused, patches.PatchRefused) as exc:
        return _would_refuse("apply_patch", exc)
    except patches.DiffCancelled:
        return KILLED_PREVIEW


def store_output(artifacts: ArtifactStore, capture: OutputCapture) -> str:
    """Hand the spooled output to the artifact store, streaming when it can."""
    try:
        if hasattr(artifacts, "put_file"):
            sink: FileArtifactSink = artifacts  # type: ignore[assignment]
            return sink.put_file(capture.path, "text/plain")
        return artifacts.put(capture.path.read_bytes(), "text/plain")
    finally:
        capture.discard()


def run_check(ctx: ToolContext, call: Call) -> ToolResult:
    check = call.check
    if check is None:
        return _error("run_check reached the executor without a check definition from policy")
    base: dict[str, JSON] = {"check_id": check.check_id, "check_version": check.version}
    # The workspace's size as the index keeps it: no walk, whatever the tree's size.
    over = ctx.quota.problem(ctx.workspace.index.usage(), ctx.workspace.dir)
    if over is not None:
        # A short host disk is not the run's doing: retried like any transient failure.
        # An over-full workspace is: the check fails without running.
        message = f"the check was not run: {over.reason}"
        return ToolResult("transient", "none", {**base, "error": message}) if over.host else _error(message, **base)
    # What this check may store of its output: the per-check cap, within what is left
    # of the run's quota. A run that has used the quota up gets no more checks, and
    # says why, rather than a record with the outputs silently missing.
    store_limit = ctx.quota.output_limit(run_stored_bytes(ctx.artifacts))
    if isinstance(store_limit, QuotaProblem):
        return _error(f"the check was not run: {store_limit.reason}", **base, artifact_quota=True)
    try:
        container = ctx.container_for(call)
    except SandboxUnavailable as exc:
        return _infrastructure(exc.reason, **base)
    listener = ctx.live_output(call.call_id) if ctx.live_output is not None else None
    capture = OutputCapture(inline_limit=call.max_output_bytes // 2, spool_dir=ctx.spool_dir, listener=listener, store_limit=store_limit)
    try:
        result = _run_read_only(ctx, container, check, capture)
    except SandboxUnavailable as exc:
        capture.discard()
        return _infrastructure(exc.reason, **base)
    except BaseException:
        capture.discard()
        raise
    ref = store_output(ctx.artifacts, capture)
    if result.lost is not None:
        # What it printed before the container failed is kept for the record only.
        return _infrastructure(result.lost, [ref], **base, output_ref=ref, output=capture.excerpt(ref))
    return _check_outcome(container, check, result, capture, ref, base)


def _run_read_only(ctx: ToolContext, container: SandboxContainer, check: CheckDef, capture: OutputCapture) -> ExecResult:
    """The check's command, its output spooled into ``capture``."""

    def watch() -> str | None:
        # The check cannot write the worker's disk, only its output does (spooled
        # here): one statvfs, never a walk. Scratch is bounded by the kernel.
        problem = ctx.quota.host_problem(capture.path.parent)
        return None if problem is None else problem.reason

    # The container proves its workspace mount read-only before the check runs
    # (or refuses to run it), so the check observes and never changes the tree
    # and nothing is walked after it; a crash inside leaves the marker that has
    # the next worker walk it.
    with ctx.workspace.untrusted_code():
        return container.exec(
            list(check.command),
            timeout_seconds=check.timeout_seconds,
            capture=capture,
            watch=watch,
            watch_seconds=WATCH_SECONDS,
            on_copy=check.on_copy,
        )


def _check_outcome(
    container: SandboxContainer, check: CheckDef, result: ExecResult, capture: OutputCapture, ref: str, base: dict[str, JSON]
) -> ToolResult:
    """The receipt of a check that ran in a container that stayed up."""
    data: dict[str, JSON] = {
        **base,
        "exit_code": result.exit_code,
        "timed_out": result.timed_out,
        "timeout_seconds": check.timeout_seconds,
        "duration_ms": result.duration_ms,
        "oom_killed": result.oom_killed,
        "image_digest": container.image_digest,
        "runtime": container.spec.runtime,
        "output_ref": ref,
        "output": capture.excerpt(ref),
        "truncated": capture.truncated,
        "output_bytes": capture.total,
        # The artifact holds all of the output, or (cut) its first and last bytes
        # around a notice: never a silently partial record.
        "output_cut": capture.cut,
        "output_stored_bytes": capture.spooled,
    }
    if result.stopped_for is not None:
        # Cut off for want of host disk (the only reason the watch gives): it proves
        # nothing either way, changed nothing it could not see read-only, and is
        # retried like the refusal before a check.
        data["error"] = f"the check was stopped: {result.stopped_for}"
        return ToolResult("transient", "none", data, [ref])
    if result.killed or result.error:
        # The check was cut off: whatever it did to the workspace is unknown (the
        # harness re-reads the revision itself), and it proves nothing.
        data["error"] = "the sandbox was killed during the check" if result.killed else str(result.error)
        return ToolResult("unknown", "unknown", data, [ref])
    return ToolResult("ok", "none", data, [ref])


def outbox_path(outbox: Path, key: str) -> Path:
    if not KEY_PATTERN.match(key):
        raise ValueError(f"not an idempotency key: {key!r}")
    return outbox / f"{key}.patch"


def _outbox_content(ctx: ToolContext, key: str, published: Publication, message: str) -> bytes:
    header = [f"# Harness publish {key}", f"# run: {ctx.run_id}", f"# revision: {published.revision}"]
    header += [f"# {line}" for line in message.splitlines() or [""]]
    return ("\n".join(header) + "\n\n" + published.text).encode("utf-8", errors="surrogateescape")


def _publish_trailers(ctx: ToolContext, key: str) -> list[tuple[str, str]]:
    """Harness's own trailers, known when the publish is asked for (who grants it is
    in the run's audit trail, found by the run id: a commit fixed before the decision
    cannot name its reviewer)."""
    return [("Harness-Run", ctx.run_id), ("Harness-Operation", key)]


def plan_publish(ctx: ToolContext, args: Mapping[str, JSON], key: str, at: float) -> Plan:
    """The publish fixed: for a remote, the one commit and where it goes; for the
    outbox, the patch file's name and digest. The reviewer is shown exactly the patch
    (for a remote, every part of the commit above it)."""
    message = str(args.get("message", ""))
    try:
        published = publication(ctx.workspace, ctx.write_paths, ctx.cancelled)
    except PublishRefused as exc:
        return _refused_plan("publish", str(exc))
    except patches.DiffCancelled:
        return _refused_plan("publish", "the run was killed while its changes were read", KILLED_PREVIEW)
    shown = published.shown(ctx.review_limits)
    if ctx.remote is not None:
        fixed = ctx.remote.plan(published.patch.text, message, _publish_trailers(ctx, key), at)
        return Plan(fixed.model_dump(), describe_push(fixed) + shown)
    content = _outbox_content(ctx, key, published, message)
    outbox = OutboxEffect(
        file=outbox_path(ctx.outbox, key).name,
        revision=published.revision,
        message=message,
        sha256=sha256_bytes(content),
        bytes=len(content),
    )
    return Plan(outbox.model_dump(), shown)


def _refused_plan(tool: str, reason: str, shown: str | None = None) -> Plan:
    return Plan(RefusedEffect(reason=reason).model_dump(), _would_refuse(tool, reason) if shown is None else shown)


def _fixed(call: Call, kind: type[FixedEffect]) -> FixedEffect | str:
    """The call's fixed effect if it is of ``kind``, else why the call is refused."""
    if call.effect is None:
        return f"{call.tool} reached the executor without the effect fixed when it was asked for"
    effect = parse_effect(dict(call.effect))
    if isinstance(effect, RefusedEffect):
        return effect.reason
    if not isinstance(effect, kind):
        return f"the approved effect ({effect.kind}) is not what this run's workspace does ({kind.model_fields['kind'].default})"
    return effect


def publish(ctx: ToolContext, call: Call) -> ToolResult:
    key = call.idempotency_key
    if key is None or not KEY_PATTERN.match(key):
        return _error("publish reached the executor without a valid idempotency key")
    if ctx.remote is not None:
        pushed = _fixed(call, PushEffect)
        if isinstance(pushed, str):
            return _error(f"nothing was published: {pushed}", idempotency_key=key)
        return push(ctx, ctx.remote, pushed, key)
    fixed = _fixed(call, OutboxEffect)
    if isinstance(fixed, str):
        return _error(f"nothing was published: {fixed}", idempotency_key=key)
    target = outbox_path(ctx.outbox, key)
    if target.exists():
        return ToolResult("ok", "none", {"idempotency_key": key, "duplicate": True, "outbox_file": target.name})
    try:
        published = publication(ctx.workspace, ctx.write_paths, ctx.cancelled)
    except PublishRefused as exc:
        return _error(f"nothing was published: {exc}", idempotency_key=key)
    except patches.DiffCancelled:
        return _killed(idempotency_key=key)
    if ctx.cancelled is not None and ctx.cancelled():
        return _killed(idempotency_key=key)
    patch = published.patch
    content = _outbox_content(ctx, key, published, fixed.message)
    if (target.name, sha256_bytes(content)) != (fixed.file, fixed.sha256):
        return _error("nothing was published: the patch made now is not the one approved", idempotency_key=key)
    ctx.outbox.mkdir(parents=True, exist_ok=True)
    tmp = ctx.outbox / f".{key}.{secrets.token_hex(6)}.tmp"
    try:
        with open(tmp, "xb") as handle:
            handle.write(content)
            handle.flush()
            os.fsync(handle.fileno())
        # link() is the O_EXCL of renames: exactly one publisher of a key wins, and
        # a reader never sees a half-written patch under the key's name.
        os.link(tmp, target)
    except FileExistsError:
        return ToolResult("ok", "none", {"idempotency_key": key, "duplicate": True, "outbox_file": target.name})
    except OSError as exc:
        if target.exists():
            raise
        return ToolResult("transient", "none", {"idempotency_key": key, "error": f"could not write the outbox: {exc}"})
    finally:
        tmp.unlink(missing_ok=True)
    _fsync_dir(ctx.outbox)
    ref = ctx.artifacts.put(content, "text/x-diff")
    data: dict[str, JSON] = {
        "idempotency_key": key,
        "duplicate": False,
        "outbox_file": target.name,
        "files": list(patch.files),
        "skipped": list(patch.skipped),
        "bytes": len(content),
        "patch_ref": ref,
    }
    return ToolResult("ok", "applied", data, [ref])


def find_publish(ctx: ToolContext, effect: PendingEffect) -> Reconciliation:
    """Whether a publish of unknown outcome happened: its branch on the remote, or its
    file in the outbox (local, so the answer is authoritative)."""
    if effect.idempotency_key is None:
        return Reconciliation(False, None, False, "no idempotency key to look up")
    if ctx.remote is not None:
        try:
            applied, detail = ctx.remote.lookup(effect.idempotency_key)
        except PushConflict as exc:
            return Reconciliation(True, False, True, str(exc), conflict=True)
        return Reconciliation(True, applied, True, detail)
    found = outbox_path(ctx.outbox, effect.idempotency_key).exists()
    detail = "found in the outbox" if found else "not in the outbox (the outbox is local: authoritative)"
    return Reconciliation(True, found, True, detail)


def push(ctx: ToolContext, target: RemoteTarget, fixed: PushEffect, key: str) -> ToolResult:
    """Publish to the run's remote: exactly the fixed commit, pushed to the run's branch."""
    base: dict[str, JSON] = {"idempotency_key": key, "remote": target.url, "branch": target.branch}
    try:
        patch = publication(ctx.workspace, ctx.write_paths, ctx.cancelled).patch
    except PublishRefused as exc:
        return _error(f"nothing was published: {exc}", **base)
    except patches.DiffCancelled:
        return _killed(**base)
    if ctx.cancelled is not None and ctx.cancelled():
        return _killed(**base)
    try:
        result = target.publish(key, fixed, patch.text)
    except EffectDrift as exc:
        return _error(f"nothing was published: the commit is not the one approved ({exc})", **base)
    except RemoteError as exc:
        # The branch could not be looked up: nothing was pushed yet. Credentials the
        # remote refuses will not get better by retrying.
        if exc.cause == "auth":
            return _error(f"the remote refused the server's credentials: {exc.message}", **base)
        return ToolResult("transient", "none", {**base, "error": f"the remote could not be reached: {exc.message}"})
    data: dict[str, JSON] = {
        **base,
        "commit": result.commit,
        "duplicate": result.duplicate,
        "files": list(patch.files),
        "skipped": list(patch.skipped),
    }
    if result.outcome == "applied":
        return ToolResult("ok", "none" if result.duplicate else "applied", data)
    if result.outcome == "rejected":
        return ToolResult("ok", "none", {**data, "rejected": True, "error": f"the remote refused the push: {result.message}"})
    if result.outcome == "not_applied":
        return ToolResult("transient", "none", {**data, "error": f"the push did not reach the remote: {result.message}"})
    return ToolResult("unknown", "unknown", {**data, "error": f"the push's outcome is unknown: {result.message}"})


def plan_change_request(ctx: ToolContext, args: Mapping[str, JSON], key: str, at: float) -> Plan:
    """The change request fixed: forge, project, both branches, title and body."""
    if ctx.remote is None:
        return _refused_plan("open_change_request", "it needs a workspace cloned from a git remote; this run publishes to the outbox")
    if ctx.forge is None:
        return _refused_plan("open_change_request", "no forge is configured on this server (HARNESS_FORGE)")
    forge = ctx.forge
    try:
        project = forge.checked_project()
    except ForgeError as exc:
        return _refused_plan("open_change_request", exc.message)
    try:
        target: str | None = forge.target_branch()
    except ForgeError:
        target = None
    fixed = ChangeRequestEffect(
        forge=forge.access.kind,
        web_url=forge.access.web_url,
        project=project,
        source=forge.source,
        target=target,
        title=str(args.get("title", "")),
        body=str(args.get("body", "")),
    )
    return Plan(fixed.model_dump(), describe_change_request(fixed))


def open_change_request(ctx: ToolContext, call: Call) -> ToolResult:
    """The fixed pull or merge request from the run's pushed branch; one per branch
    (the forge's open requests are looked up first)."""
    key = call.idempotency_key
    fixed = _fixed(call, ChangeRequestEffect)
    if isinstance(fixed, str):
        return _error(f"no change request was opened: {fixed}")
    if ctx.remote is None or ctx.forge is None:
        return _error("no change request was opened: this worker has no forge for the run's remote (HARNESS_FORGE)")
    if (ctx.forge.access.kind, ctx.forge.access.web_url) != (fixed.forge, fixed.web_url):
        return _error(f"no change request was opened: the approved forge is {fixed.web_url}, this worker's is {ctx.forge.access.web_url}")
    # The approved project and branches, whatever this worker's settings would derive.
    forge = replace(ctx.forge, project=fixed.project, source=fixed.source, target=fixed.target, _client=None)
    branch = fixed.source
    base: dict[str, JSON] = {"idempotency_key": key, "remote": ctx.remote.url, "branch": branch, "project": forge.project}
    try:
        head = ctx.remote.remote_head()
    except RemoteError as exc:
        if exc.cause == "auth":
            return _error(f"the remote refused the server's credentials: {exc.message}", **base)
        return ToolResult("transient", "none", {**base, "error": f"the remote could not be reached: {exc.message}"})
    if head is None:
        return _error(f"branch {branch} is not on {ctx.remote.url}: publish the change first, then open its change request", **base)
    try:
        opened = forge.open(fixed.title, fixed.body)
    except ForgeError as exc:
        if exc.failure == "refused":
            return _error(f"no change request was opened: {exc.message}", **base, refused=True)
        if exc.failure == "not_sent":
            return ToolResult("transient", "none", {**base, "error": f"no change request was opened: {exc.message}"})
        return ToolResult("unknown", "unknown", {**base, "error": f"the change request's outcome is unknown: {exc.message}"})
    data: dict[str, JSON] = {**base, "commit": head, "duplicate": opened.duplicate, "change_request": opened.request.as_json()}
    return ToolResult("ok", "none" if opened.duplicate else "applied", data)


def find_change_request(ctx: ToolContext, effect: PendingEffect) -> Reconciliation:
    """The forge's open requests from the run's branch are authoritative: one open
    means ours was opened; none means it was not."""
    forge = ctx.forge
    if forge is None:
        return Reconciliation(False, None, False, "no forge is configured to look the change request up")
    try:
        found = forge.find()
    except ForgeError as exc:
        return Reconciliation(False, None, False, f"could not look the change request up: {exc.message}")
    if found is None:
        return Reconciliation(True, False, True, f"no open change request from {forge.source} on {forge.project}: it was not opened")
    return Reconciliation(True, True, True, f"change request #{found.number} from {forge.source} is open: {found.url}")


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def lookup_publish(ctx: ToolContext, call: Call) -> ToolResult:
    # Without a key in the arguments the harness names the run's own publish.
    key = str(call.args.get("idempotency_key") or call.idempotency_key)
    if ctx.remote is not None:
        try:
            found, detail = ctx.remote.lookup(key)
        except PushConflict as exc:
            return _error(str(exc), idempotency_key=key)
        except RemoteError as exc:
            return ToolResult("transient", "none", {"idempotency_key": key, "error": exc.message})
        return ToolResult("ok", "none", {"idempotency_key": key, "found": found, "authoritative": True, "detail": detail})
    found = outbox_path(ctx.outbox, key).exists()
    return ToolResult("ok", "none", {"idempotency_key": key, "found": found, "authoritative": True})


@dataclass(frozen=True)
class SandboxTool:
    """What the sandbox does for one tool of the registry. ``preview`` shows a reviewer
    what granting a workspace write would do (a call that would be refused says so);
    ``plan`` fixes an external call's effect and what a reviewer is shown of it
    (core.effects); ``reconcile`` finds whether an external effect of unknown
    outcome happened."""

    run: Callable[[ToolContext, Call], ToolResult]
    preview: Callable[[ToolContext, Mapping[str, JSON]], str] | None = None
    reconcile: Callable[[ToolContext, PendingEffect], Reconciliation] | None = None
    plan: Callable[[ToolContext, Mapping[str, JSON], str, float], Plan] | None = None


TOOLS: dict[str, SandboxTool] = {
    "list_files": SandboxTool(list_files),
    "read_file": SandboxTool(read_file),
    "search": SandboxTool(search),
    "write_file": SandboxTool(write_file, preview_write_file),
    "apply_patch": SandboxTool(apply_patch, preview_apply_patch),
    "run_check": SandboxTool(run_check),
    "publish": SandboxTool(publish, reconcile=find_publish, plan=plan_publish),
    "lookup_publish": SandboxTool(lookup_publish),
    "open_change_request": SandboxTool(open_change_request, reconcile=find_change_request, plan=plan_change_request),
}
