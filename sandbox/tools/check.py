"""``run_check``: a check from policy, run read-only in the run's container, its
output spooled under a cap into an artifact, its receipt the evidence."""

from __future__ import annotations

from core.jsonutil import JSON
from core.policy import CheckDef
from core.ports import ArtifactStore, Call
from sandbox.container.engine import SandboxUnavailable
from sandbox.container.exec_watch import ExecResult
from sandbox.container.output import OutputCapture
from sandbox.container.quota import WATCH_SECONDS, QuotaProblem
from sandbox.container.sandbox_container import SandboxContainer
from sandbox.egress.proxy import EgressProxy, EgressRefused
from sandbox.tools.context import FileArtifactSink, ToolContext, ToolResult, error_result, infrastructure_result, run_stored_bytes


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
        return error_result("run_check reached the executor without a check definition from policy")
    base: dict[str, JSON] = {"check_id": check.check_id, "check_version": check.version}
    # The workspace's size as the index keeps it: no walk, whatever the tree's size.
    over = ctx.settings.quota.problem(ctx.workspace.index.usage(), ctx.workspace.dir)
    if over is not None:
        # A short host disk is not the run's doing: retried like any transient failure.
        # An over-full workspace is: the check fails without running.
        message = f"the check was not run: {over.reason}"
        return ToolResult("transient", "none", {**base, "error": message}) if over.host else error_result(message, **base)
    # What this check may store of its output: the per-check cap, within what is left
    # of the run's quota. A run that has used the quota up gets no more checks, and
    # says why, rather than a record with the outputs silently missing.
    store_limit = ctx.settings.quota.output_limit(run_stored_bytes(ctx.artifacts))
    if isinstance(store_limit, QuotaProblem):
        return error_result(f"the check was not run: {store_limit.reason}", **base, artifact_quota=True)
    try:
        container = ctx.container_for(call)
    except SandboxUnavailable as exc:
        return infrastructure_result(exc.reason, lasting=exc.lasting, **base)
    # No network unless the policy names where: then only through a proxy for this call.
    proxy = (
        EgressProxy(check, lambda cls, fields: ctx.notify(cls, call.call_id, fields), ctx.settings.egress_max_events)
        if check.egress
        else None
    )
    try:
        environment = proxy.start(container.attach) if proxy is not None else None
    except (SandboxUnavailable, EgressRefused) as exc:
        if proxy is not None:
            proxy.close()
        if isinstance(exc, SandboxUnavailable):
            return infrastructure_result(exc.reason, lasting=exc.lasting, **base)
        return infrastructure_result(str(exc), **base)
    listener = ctx.live_output(call.call_id) if ctx.live_output is not None else None
    capture = OutputCapture(
        inline_limit=call.max_output_bytes // 2, spool_dir=ctx.settings.spool_dir, listener=listener, store_limit=store_limit
    )
    try:
        result = _run_read_only(ctx, container, check, capture, environment)
    except SandboxUnavailable as exc:
        capture.discard()
        return infrastructure_result(exc.reason, lasting=exc.lasting, **base)
    except BaseException:
        capture.discard()
        raise
    finally:
        if proxy is not None:
            base["egress"] = [summary.model_dump() for summary in proxy.close()]
    ref = store_output(ctx.artifacts, capture)
    if result.lost is not None:
        # What it printed before the container failed is kept for the record only.
        return infrastructure_result(result.lost, [ref], **base, output_ref=ref, output=capture.excerpt(ref))
    return _check_outcome(container, check, result, capture, ref, base)


def _run_read_only(
    ctx: ToolContext, container: SandboxContainer, check: CheckDef, capture: OutputCapture, environment: dict[str, str] | None
) -> ExecResult:
    """The check's command, its output spooled into ``capture``."""

    def watch() -> str | None:
        # The check cannot write the worker's disk, only its output does (spooled
        # here): one statvfs, never a walk. Scratch is bounded by the kernel.
        problem = ctx.settings.quota.host_problem(capture.path.parent)
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
            environment=environment,
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
