"""The tools with an external effect: ``publish`` (into the outbox, or one commit
pushed to the run's remote), ``open_change_request`` on a forge, and finding such an
effect again when its outcome is unknown. Each performs exactly the effect fixed
when it was asked for (core.effects), or refuses with no effect."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import TypeVar

from core.effects import ChangeRequestEffect, OutboxEffect, Plan, PushEffect, RefusedEffect, parse_effect
from core.jsonutil import JSON, sha256_bytes
from core.ports import Call, Reconciliation
from core.state import PendingEffect
from sandbox.tools.context import KEY_PATTERN, KILLED_PREVIEW, ToolContext, ToolResult, error_result, killed_result, would_refuse
from sandbox.tools.publishing import Publication, PublishRefused, publication
from sandbox.vcs.base_check import check_base
from sandbox.vcs.forges import ForgeError, describe_change_request
from sandbox.vcs.remote import EffectDrift, PushConflict, RemoteError, RemoteTarget, describe_push
from sandbox.workspace import patches

FixedEffect = TypeVar("FixedEffect", OutboxEffect, PushEffect, ChangeRequestEffect)


def outbox_file(key: str) -> str:
    """The patch's name in the outbox."""
    if not KEY_PATTERN.match(key):
        raise ValueError(f"not an idempotency key: {key!r}")
    return f"{key}.patch"


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
        published = publication(ctx.workspace, ctx.settings.write_paths, ctx.cancelled)
    except PublishRefused as exc:
        return _refused_plan("publish", str(exc))
    except patches.DiffCancelled:
        return _refused_plan("publish", "the run was killed while its changes were read", KILLED_PREVIEW)
    shown = published.shown(ctx.settings.review_limits)
    found = ctx.settings.scanner.scan(shown, message)
    bound = sorted({f.bound for f in found})
    findings = tuple(f.as_json() for f in found)
    if ctx.settings.remote is not None:
        fixed = ctx.settings.remote.plan(published.patch.text, message, _publish_trailers(ctx, key), at).model_copy(
            update={"secrets": bound}
        )
        return Plan(fixed.model_dump(), describe_push(fixed) + shown, findings)
    content = _outbox_content(ctx, key, published, message)
    outbox = OutboxEffect(
        file=outbox_file(key),
        revision=published.revision,
        message=message,
        sha256=sha256_bytes(content),
        bytes=len(content),
        secrets=bound,
    )
    return Plan(outbox.model_dump(), shown, findings)


def unshown_secrets(ctx: ToolContext, published: Publication, fixed: OutboxEffect | PushEffect, message: str) -> str | None:
    """The scan again, just before the effect, over the diff as the reviewer was
    shown it: why nothing may be published when it finds what the approved effect
    does not list (core.effects: ``secrets``), else None."""
    found = ctx.settings.scanner.scan(published.shown(ctx.settings.review_limits), message)
    unshown = [f for f in found if f.bound not in fixed.secrets]
    if not unshown:
        return None
    where = ", ".join(f"{f.path}:{f.line} ({f.kind})" for f in unshown)
    return f"nothing was published: the change holds secrets its approval did not show: {where}"


def _moved_base(ctx: ToolContext, target: RemoteTarget, published: Publication) -> str | ToolResult | None:
    """Just before a push: how the base branch moved since the run started (words for
    the receipt), None if it did not, or the transient result when the remote cannot
    be asked and the policy needs the answer."""
    if ctx.settings.base_branch == "":
        return None
    try:
        moved = check_base(target.url, target.base, ctx.settings.base_branch, published.shown(ctx.settings.review_limits), target.access)
    except RemoteError as exc:
        if ctx.settings.moved_base != "stale":
            return None
        return ToolResult("transient", "none", {"error": f"the base branch could not be compared: {exc.message}"})
    return moved.words() if moved is not None else None


def _model_message(fixed: PushEffect) -> str:
    """The message as the model wrote it: the commit's, less Harness's trailers
    (``RemoteTarget.plan`` put them after it, in a paragraph of their own)."""
    return fixed.message.rstrip("\n").rsplit("\n\n", 1)[0]


def _refused_plan(tool: str, reason: str, shown: str | None = None) -> Plan:
    return Plan(RefusedEffect(reason=reason).model_dump(), would_refuse(tool, reason) if shown is None else shown)


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
        return error_result("publish reached the executor without a valid idempotency key")
    if ctx.settings.remote is not None:
        pushed = _fixed(call, PushEffect)
        if isinstance(pushed, str):
            return error_result(f"nothing was published: {pushed}", idempotency_key=key)
        return push(ctx, ctx.settings.remote, pushed, key)
    fixed = _fixed(call, OutboxEffect)
    if isinstance(fixed, str):
        return error_result(f"nothing was published: {fixed}", idempotency_key=key)
    name = outbox_file(key)
    duplicate = ToolResult("ok", "none", {"idempotency_key": key, "duplicate": True, "outbox_file": name})
    if ctx.outbox.published(key):
        return duplicate
    try:
        published = publication(ctx.workspace, ctx.settings.write_paths, ctx.cancelled)
    except PublishRefused as exc:
        return error_result(f"nothing was published: {exc}", idempotency_key=key)
    except patches.DiffCancelled:
        return killed_result(idempotency_key=key)
    if ctx.cancelled():
        return killed_result(idempotency_key=key)
    if (unshown := unshown_secrets(ctx, published, fixed, fixed.message)) is not None:
        return error_result(unshown, idempotency_key=key)
    patch = published.patch
    content = _outbox_content(ctx, key, published, fixed.message)
    if (name, sha256_bytes(content)) != (fixed.file, fixed.sha256):
        return error_result("nothing was published: the patch made now is not the one approved", idempotency_key=key)
    # The bytes first, then the key: a published key always has its patch, and of
    # concurrent publishers of a key the outbox lets exactly one take it.
    ref = ctx.artifacts.put(content, "text/x-diff")
    if not ctx.outbox.publish(key, ctx.run_id, ref, len(content)):
        return duplicate
    data: dict[str, JSON] = {
        "idempotency_key": key,
        "duplicate": False,
        "outbox_file": name,
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
    if ctx.settings.remote is not None:
        try:
            applied, detail = ctx.settings.remote.lookup(effect.idempotency_key)
        except PushConflict as exc:
            return Reconciliation(True, False, True, str(exc), conflict=True)
        return Reconciliation(True, applied, True, detail)
    found = ctx.outbox.published(effect.idempotency_key)
    detail = "found in the outbox" if found else "not in the outbox (the outbox is the record: authoritative)"
    return Reconciliation(True, found, True, detail)


def push(ctx: ToolContext, target: RemoteTarget, fixed: PushEffect, key: str) -> ToolResult:
    """Publish to the run's remote: exactly the fixed commit, pushed to the run's branch."""
    base: dict[str, JSON] = {"idempotency_key": key, "remote": target.url, "branch": target.branch}
    try:
        published = publication(ctx.workspace, ctx.settings.write_paths, ctx.cancelled)
    except PublishRefused as exc:
        return error_result(f"nothing was published: {exc}", **base)
    except patches.DiffCancelled:
        return killed_result(**base)
    if ctx.cancelled():
        return killed_result(**base)
    if (unshown := unshown_secrets(ctx, published, fixed, _model_message(fixed))) is not None:
        return error_result(unshown, **base)
    patch = published.patch
    moved = _moved_base(ctx, target, published)
    if isinstance(moved, ToolResult):
        return moved
    if moved is not None and ctx.settings.moved_base == "stale":
        return error_result(f"nothing was published: {moved}; the policy makes an approval on a moved base stale", **base)
    if moved is not None:
        base["base_moved"] = moved
    try:
        result = target.publish(key, fixed, patch.text)
    except EffectDrift as exc:
        return error_result(f"nothing was published: the commit is not the one approved ({exc})", **base)
    except RemoteError as exc:
        # The branch could not be looked up: nothing was pushed yet. Credentials the
        # remote refuses will not get better by retrying.
        if exc.cause == "auth":
            return error_result(f"the remote refused the server's credentials: {exc.message}", **base)
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
    if ctx.settings.remote is None:
        return _refused_plan("open_change_request", "it needs a workspace cloned from a git remote; this run publishes to the outbox")
    if ctx.settings.forge is None:
        return _refused_plan("open_change_request", "no forge is configured on this server (HARNESS_FORGE)")
    forge = ctx.settings.forge
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
        return error_result(f"no change request was opened: {fixed}")
    if ctx.settings.remote is None or ctx.settings.forge is None:
        return error_result("no change request was opened: this worker has no forge for the run's remote (HARNESS_FORGE)")
    if (ctx.settings.forge.access.kind, ctx.settings.forge.access.web_url) != (fixed.forge, fixed.web_url):
        return error_result(
            f"no change request was opened: the approved forge is {fixed.web_url}, this worker's is {ctx.settings.forge.access.web_url}"
        )
    # The approved project and branches, whatever this worker's settings would derive.
    forge = replace(ctx.settings.forge, project=fixed.project, source=fixed.source, target=fixed.target, _client=None)
    branch = fixed.source
    base: dict[str, JSON] = {"idempotency_key": key, "remote": ctx.settings.remote.url, "branch": branch, "project": forge.project}
    try:
        head = ctx.settings.remote.remote_head()
    except RemoteError as exc:
        if exc.cause == "auth":
            return error_result(f"the remote refused the server's credentials: {exc.message}", **base)
        return ToolResult("transient", "none", {**base, "error": f"the remote could not be reached: {exc.message}"})
    if head is None:
        return error_result(
            f"branch {branch} is not on {ctx.settings.remote.url}: publish the change first, then open its change request", **base
        )
    try:
        opened = forge.open(fixed.title, fixed.body)
    except ForgeError as exc:
        if exc.failure == "refused":
            return error_result(f"no change request was opened: {exc.message}", **base, refused=True)
        if exc.failure == "not_sent":
            return ToolResult("transient", "none", {**base, "error": f"no change request was opened: {exc.message}"})
        return ToolResult("unknown", "unknown", {**base, "error": f"the change request's outcome is unknown: {exc.message}"})
    data: dict[str, JSON] = {**base, "commit": head, "duplicate": opened.duplicate, "change_request": opened.request.as_json()}
    return ToolResult("ok", "none" if opened.duplicate else "applied", data)


def find_change_request(ctx: ToolContext, effect: PendingEffect) -> Reconciliation:
    """The forge's open requests from the run's branch are authoritative: one open
    means ours was opened; none means it was not."""
    forge = ctx.settings.forge
    if forge is None:
        return Reconciliation(False, None, False, "no forge is configured to look the change request up")
    try:
        found = forge.find()
    except ForgeError as exc:
        return Reconciliation(False, None, False, f"could not look the change request up: {exc.message}")
    if found is None:
        return Reconciliation(True, False, True, f"no open change request from {forge.source} on {forge.project}: it was not opened")
    return Reconciliation(True, True, True, f"change request #{found.number} from {forge.source} is open: {found.url}")


def lookup_publish(ctx: ToolContext, call: Call) -> ToolResult:
    # Without a key in the arguments the harness names the run's own publish.
    key = str(call.args.get("idempotency_key") or call.idempotency_key)
    if ctx.settings.remote is not None:
        try:
            found, detail = ctx.settings.remote.lookup(key)
        except PushConflict as exc:
            return error_result(str(exc), idempotency_key=key)
        except RemoteError as exc:
            return ToolResult("transient", "none", {"idempotency_key": key, "error": exc.message})
        return ToolResult("ok", "none", {"idempotency_key": key, "found": found, "authoritative": True, "detail": detail})
    found = ctx.outbox.published(key)
    return ToolResult("ok", "none", {"idempotency_key": key, "found": found, "authoritative": True})


def remember_pushes(ctx: ToolContext, fixed: Mapping[str, Mapping[str, JSON]]) -> list[str]:
    """After the run's workspace was rebuilt on this worker: for each publish key and its
    fixed effect (from the run's log), the commit it pushes or pushed, made again and
    named as the key's (``RemoteTarget.remember``), so that a publish of unknown outcome
    is looked up here as it would be on the worker that pushed it, not taken for
    somebody else's commit. A key whose commit the workspace no longer makes (settled at
    an earlier revision) is left out. The keys remembered."""
    if ctx.settings.remote is None or not fixed:
        return []
    try:
        patch = publication(ctx.workspace, ctx.settings.write_paths, ctx.cancelled).patch.text
    except (PublishRefused, patches.DiffCancelled):
        return []
    remembered = []
    for key, raw in fixed.items():
        effect = parse_effect(raw)
        if not isinstance(effect, PushEffect):
            continue
        try:
            ctx.settings.remote.remember(key, effect, patch)
        except EffectDrift:
            continue
        remembered.append(key)
    return remembered
