"""How run events are shown: one label, tone and one-line summary per event, and
tool calls grouped into cards. The page, the JSON endpoints and the WebSocket all
present events through ``present``, so the live stream and a reload look the same.

Everything here returns plain data; templates and the browser script escape it."""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable
from typing import Any, assert_never, get_args

from django.conf import settings
from django.urls import reverse
from pydantic import ValidationError

from core import events as ev
from core.visible import HIDDEN_KIND, visible_data
from live.wording import duration, human
from runs.agents.names import agent_name, agent_words, capitalized
from runs.models import Event

log = logging.getLogger(__name__)

ARTIFACT_REF = re.compile(r"sha256:[0-9a-f]{64}")
ARTIFACT_KEYS = ("artifacts", "output_ref", "artifact")
# Content-addressed: the reference of an empty output is always this one, and a
# link to it would open an empty page.
EMPTY_OUTPUT_REF = "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
REPLAY_PAGE = 500
# Colour of each run and approval status; events carry their own tone.
TONES = {
    "running": "info",
    "queued": "muted",
    "waiting_approval": "warn",
    "complete": "ok",
    # Finished, with something asked of the run undone: never the green of success.
    "unpublished": "warn",
    "partial": "warn",
    "stopped": "bad",
    "pending": "warn",
    "granted": "ok",
    "consumed": "ok",
    "denied": "bad",
    "expired": "muted",
    "stale": "muted",
    "cancelled": "muted",
}


def outcome_tone(code: str) -> str:
    """A run outcome's tone: each stop reason is a stop."""
    return TONES.get(code, "bad")


# A string argument is also shown as text (its line breaks as breaks) when it is
# longer than this or spans lines; the exact JSON stays beside it.
TEXT_ARG_CHARS = 60


def short(revision: object) -> str:
    return str(revision or "")[:12]


def artifact_refs(value: Any) -> list[str]:
    """The artifact references inside a JSON value (a receipt's ``artifacts``, a
    check's ``output_ref``, a truncated result's ``artifact``), in order. Other
    sha256 strings, such as image digests, are not artifacts."""
    found: list[str] = []

    def keep(item: Any) -> None:
        if isinstance(item, str) and ARTIFACT_REF.fullmatch(item) and item not in found:
            found.append(item)

    def walk(item: Any) -> None:
        if isinstance(item, dict):
            for key, child in item.items():
                if key in ARTIFACT_KEYS:
                    for ref in child if isinstance(child, list) else [child]:
                        keep(ref)
                else:
                    walk(child)
        elif isinstance(item, list):
            for child in item:
                walk(child)

    walk(value)
    return found


def _proposal_parts(proposal: Any) -> tuple[str, Any]:
    if isinstance(proposal, dict) and isinstance(proposal.get("tool"), str):
        return proposal["tool"], proposal.get("args")
    return "", None


def _receipt_view(e: ev.ReceiptRecorded) -> tuple[str, str, str]:
    receipt = e.receipt if isinstance(e.receipt, dict) else {}
    status, effect = receipt.get("status", "?"), receipt.get("effect", "?")
    if not e.valid:
        return "Receipt rejected", "bad", e.problem or "invalid receipt"
    detail = f"effect {effect}, revision {short(receipt.get('revision'))}"
    data = receipt.get("data")
    if status == "ok" and isinstance(data, dict) and isinstance(data.get("exit_code"), int):
        # A check's receipt says it ran, not that it passed: the verdict is the next
        # event's, so a failing check is not announced in green first.
        return "Receipt: the check ran", "info", f"{detail}, exit {data['exit_code']}"
    return f"Receipt {status}", "ok" if status == "ok" else "warn", detail


_RunEvent = (
    ev.RunStarted
    | ev.RunResumed
    | ev.PolicyChanged
    | ev.InvariantRepaired
    | ev.KillRequested
    | ev.ModelNote
    | ev.AgentStarted
    | ev.AgentEnded
    | ev.Stopped
)


def _run_view(e: _RunEvent) -> tuple[str, str, str]:
    """A run's start, resumption, policy, repairs, kill, model notes and stop."""
    match e:
        case ev.RunStarted():
            clipped = ", ".join(f"{k} {v['asked']}→{v['allowed']}" for k, v in e.clipped.items())
            extra = f"; limits clipped by policy: {clipped}" if clipped else ""
            return "Run started", "info", f"task {e.task_id}, policy v{e.policy_version}, revision {short(e.revision)}{extra}"
        case ev.RunResumed():
            return "Resumed", "info", e.reason
        case ev.PolicyChanged():
            return "Policy changed", "info", f"the gates decide under policy v{e.new_version} now (was v{e.old_version})"
        case ev.InvariantRepaired():
            return "Repaired", "warn", f"{e.invariant}: {e.repair}"
        case ev.KillRequested():
            whom = {"run": "this run", "project": "every active run of its project"}.get(e.scope, "every active run (Stop all runs)")
            why = f": {e.reason}" if e.reason else ""
            return "Kill requested", "bad", f"by {e.by} for {whom}{why}"
        case ev.ModelNote() if e.kind == "budget_reserve":
            return "Budget reserve", "warn", str(e.detail.get("message", ""))
        case ev.ModelNote() if e.kind == "agent_call":
            # Written just before the proposal it took (runs.agents.proposer): the next call is the agent's.
            name = capitalized(agent_name(str(e.detail.get("agent", ""))))
            request = f" (its request {e.detail['request']})" if e.detail.get("request") else ""
            return f"Proposed by {name}", "info", f"the next call is the outside agent's{request}; the gates decide it as any proposal"
        case ev.ModelNote() if e.detail.get("via") == "model proxy":
            return _proxy_note_view(e)
        case ev.ModelNote():
            return f"Model {e.kind}", "muted", ", ".join(f"{k}={v}" for k, v in e.detail.items())[:300]
        case ev.AgentStarted():
            return f"Agent started: {agent_words(e.preset, e.version)}", "info", f"{e.preset} {e.version}, image {e.image}"
        case ev.AgentEnded():
            return _agent_ended_view(e)
        case ev.Stopped():
            if e.status == "complete" and e.outcome not in ("", "complete"):
                # finish was accepted with something asked of the run undone: said as such.
                return f"Finished: {human(e.outcome)}", outcome_tone(e.outcome), e.said
            if e.status == "complete":
                return "Complete", "ok", e.message
            return f"Stopped: {human(e.status)}", "bad", _stop_message(e)
        case _:
            assert_never(e)


def _agent_ended_view(e: ev.AgentEnded) -> tuple[str, str, str]:
    said = {"exited": f"exit {e.exit_code}", "killed": "killed", "deadline": "stopped at the deadline", "failed": "could not run"}[e.reason]
    # Why it could not start or work (its MCP connection failed), when the driver knew.
    said = e.problem or said
    return (
        "Agent ended",
        "ok" if e.reason == "exited" and e.exit_code == 0 else "warn",
        f"{capitalized(agent_name(e.preset))} ({e.preset}): {said} after {e.duration_ms / 1000:.1f} s",
    )


def _proxy_note_view(e: ev.ModelNote) -> tuple[str, str, str]:
    """An outside agent's model request through Harness's model proxy (runs.agents.usage)."""
    d = e.detail
    where = f"{d.get('model', '?')} ({d.get('provider', '?')} {d.get('api', '')})".replace(" )", ")")
    if e.kind == "usage":
        cost = d.get("cost_usd")
        priced = f", ${cost:.4f}" if isinstance(cost, int | float) else ", not priced"
        total = d.get("total_cost_usd")
        run_total = f"; the run's total {d.get('total_tokens', 0)} tokens" + (f", ${total:.4f}" if isinstance(total, int | float) else "")
        said = f"{where}: {d.get('input_tokens', 0)} in + {d.get('output_tokens', 0)} out tokens{priced}{run_total}"
        return f"Model request {d.get('request', '')} (model proxy)".replace("  ", " "), "muted", said
    if e.kind == "error":
        return "Model request failed (model proxy)", "warn", f"{where}: {d.get('message', '')}"
    # The label stays short (it does not wrap); why it was refused is the detail's.
    why = "" if e.kind == "refused" else f"{human(e.kind)}: "
    return "Model request refused", "warn", f"by the model proxy: {why}{d.get('message', '')}"


_GateEvent = (
    ev.Proposed | ev.InvalidInput | ev.SecretsFound | ev.Denied | ev.CallAdmitted | ev.DuplicateEffect | ev.CheckRequired | ev.WriteBlocked
)


def _gate_view(e: _GateEvent) -> tuple[str, str, str]:
    """A proposal and what the gates made of it."""
    match e:
        case ev.Proposed():
            tool, _ = _proposal_parts(e.proposal)
            return f"Proposal #{e.number}", "info", tool or "malformed proposal"
        case ev.InvalidInput():
            problems = "; ".join(f"{x.field}: {x.message}" for x in e.problems)
            return f"Invalid input ({e.gate})", "warn", problems
        case ev.SecretsFound():
            where = ", ".join(
                f"{f.get('path')}:{f.get('line')} ({f.get('kind')}{f': {c}' if (c := f.get('chars')) else ''})" for f in e.findings
            )
            found = "Secrets found" if any(f.get("kind") != HIDDEN_KIND for f in e.findings) else "Hidden characters found"
            if e.decision == "refuse":
                return f"{found}: publish refused", "bad", f"{e.tool}: {where}; nothing was published: {e.reason}"
            return f"{found}: shown to the reviewer", "warn", f"{e.tool}: {where}"
        case ev.Denied():
            return "Denied", "bad", f"{e.tool} by rule '{e.rule}': {e.reason}"
        case ev.CallAdmitted():
            return "Admitted", "ok", f"{e.decision} by rule '{e.rule}' at revision {short(e.revision)}"
        case ev.DuplicateEffect():
            return "Already done", "warn", f"{e.tool} was already {e.status} by call {e.of_call}: nothing performed again"
        case ev.CheckRequired():
            return "Check required", "warn", f"{e.for_tool} needs {' and '.join(e.missing)} to pass on revision {short(e.revision)} first"
        case ev.WriteBlocked():
            return "Write blocked", "warn", f"{e.tool} waits for unresolved effects: {', '.join(e.pending)}"
        case _:
            assert_never(e)


_ApprovalEvent = (
    ev.ApprovalRequired
    | ev.ApprovalConsumed
    | ev.ApprovalRefused
    | ev.ApprovalDecided
    | ev.ApprovalLapsed
    | ev.WaitEnded
    | ev.ChangesRequested
)


def _approval_view(e: _ApprovalEvent) -> tuple[str, str, str]:
    """A reviewer's part: asked, decided, lapsed, used, and the wait for it."""
    match e:
        case ev.ApprovalRequired():
            return "Approval required", "warn", f"rule '{e.rule}' asks a reviewer, revision {short(e.revision)}"
        case ev.ApprovalConsumed():
            return "Approval used", "ok", "the granted approval was consumed by this call"
        case ev.ApprovalRefused():
            # The reviewer's decision is its own event (approval_decided); this is the
            # run acting on it.
            return "Call refused", "bad", "the reviewer's denial stops the run"
        case ev.ApprovalDecided():
            if e.decision == "changes_requested":
                return f"Changes requested by {e.by}", "warn", e.reason
            granted = e.decision == "granted"
            alone = "self-approved: the person who started the run, no second reviewer" if e.self_approved else ""
            tone = ("warn" if alone else "ok") if granted else "bad"
            counted = f" ({e.grants} of {e.needed} needed)" if granted and e.needed > 1 else ""
            return f"{'Granted' if granted else 'Denied'} by {e.by}{counted}", tone, "; ".join(x for x in (alone, e.reason) if x)
        case ev.ApprovalLapsed():
            return f"Approval {human(e.status)}", "warn", e.reason
        case ev.ChangesRequested():
            again = "the identical call again: not asked for again, " if e.repeated else ""
            return "Not performed: changes requested", "warn", f"{again}the model reads {e.by}'s words"
        case ev.WaitEnded():
            after = f"after {duration(e.waited_seconds)} waiting; " if e.waited_seconds else ""
            goes_on = "the run continues" if e.run == "running" else "the run stops"
            return f"Wait over: {human(e.exit)}", "ok" if e.run == "running" else "bad", f"{after}{goes_on}{_wait_reason(e)}"
        case _:
            assert_never(e)


# The ways out of a wait whose reason an earlier event of the run already says: a
# reviewer's decision (approval_decided) or the request's lapse (approval_lapsed). A
# stale exit keeps its words: a grant used by another call has no lapse to say them.
_SAID_BY = {
    "granted": "the reviewer's decision",
    "denied": "the reviewer's decision",
    "changes_requested": "the reviewer's decision",
    "expired": "the request's lapse",
    "cancelled": "the request's lapse",
}


def _wait_reason(e: ev.WaitEnded) -> str:
    """The reason once, where it was decided: the wait's end refers to it."""
    if not e.reason:
        return ""
    said = _SAID_BY.get(e.exit)
    return f" (the reason is in {said})" if said else f": {e.reason}"


def _stop_message(e: ev.Stopped) -> str:
    """A stop that a wait's end caused says ``approval <exit>: <reason>``
    (core.waits); its reason was said where it was decided, so the stop refers to it."""
    for exit, said in _SAID_BY.items():
        if e.message.startswith(f"approval {exit}: "):
            return f"approval {human(exit)} (the reason is in {said})"
    return e.message


_ExecutionEvent = (
    ev.CallStarted
    | ev.ReceiptRecorded
    | ev.Retry
    | ev.SandboxWaiting
    | ev.SandboxWaitOver
    | ev.EgressConnection
    | ev.EgressConnectionsOmitted
    | ev.PendingEffectRecorded
    | ev.EffectReconciled
    | ev.EvidenceRecorded
    | ev.EvidenceCleared
    | ev.WorkspaceChanged
)


def _execution_view(e: _ExecutionEvent) -> tuple[str, str, str]:
    """A call being carried out: attempts, the sandbox, receipts, effects and evidence."""
    match e:
        case ev.CallStarted():
            return f"Started, attempt {e.attempt}", "info", e.tool
        case ev.ReceiptRecorded():
            return _receipt_view(e)
        case ev.Retry():
            return "Retry", "warn", f"attempt {e.attempt} after {e.backoff_seconds}s: {e.reason}"
        case ev.SandboxWaiting():
            return "Waiting for the sandbox engine", "warn", e.reason
        case ev.SandboxWaitOver():
            if e.engine_back:
                return "Sandbox engine back", "ok", f"after {e.waited_seconds}s"
            return "Gave up waiting for the sandbox engine", "bad", f"after {e.waited_seconds}s: {e.detail}"
        case ev.EgressConnection():
            return _egress_view(e)
        case ev.EgressConnectionsOmitted():
            moved = f"{e.allowed} allowed, {e.refused} refused, {e.bytes_out} bytes out, {e.bytes_in} bytes in"
            return f"Network: {e.connections} more connections", "warn", f"check {e.check_id}, past {e.limit} recorded: {moved}"
        case ev.PendingEffectRecorded():
            return "Pending effect", "bad", f"{e.tool} ({e.kind}): {e.reason}"
        case ev.EffectReconciled():
            return "Effect reconciled", "ok", f"{'applied' if e.applied else 'not applied'}: {e.detail}"
        case ev.EvidenceRecorded():
            verdict = "passed" if e.passed else "failed"
            current = "current" if e.current else "not current"
            return (
                f"Check {e.check_id} {verdict}",
                "ok" if e.passed else "bad",
                f"exit {e.exit_code} on revision {short(e.revision)} ({current})",
            )
        case ev.EvidenceCleared():
            return "Evidence cleared", "warn", f"revision {short(e.old_revision)} → {short(e.revision)}; re-check needed"
        case ev.WorkspaceChanged():
            return "Workspace changed outside the run", "warn", f"revision {short(e.old_revision)} → {short(e.revision)}"
        case _:
            assert_never(e)


def _egress_view(e: ev.EgressConnection) -> tuple[str, str, str]:
    """A check's connection through the egress proxy, beside the check's own events."""
    where = f"{e.host}:{e.port}"
    if not e.allowed:
        return f"Network refused: {where}", "bad", f"check {e.check_id}, {e.method}: {e.reason}"
    moved = f"{e.bytes_out} bytes out, {e.bytes_in} bytes in, {e.duration_ms} ms"
    cut = f"; {e.reason}" if e.reason else ""  # let through, but not all of it (a pipelined request)
    return f"Network: {where}", "info", f"check {e.check_id}, {e.method}: {moved}{cut}"


def _describe(e: ev.AnyEvent) -> tuple[str, str, str]:
    """(label, tone, summary) for one event, by its family. Each family's match is
    exhaustive and so is this one, so a new event type fails type checking until it
    is described."""
    if isinstance(e, _RunEvent):
        return _run_view(e)
    if isinstance(e, _GateEvent):
        return _gate_view(e)
    if isinstance(e, _ApprovalEvent):
        return _approval_view(e)
    if isinstance(e, _ExecutionEvent):
        return _execution_view(e)
    assert_never(e)


# The events whose tool and arguments head a call's card, and those that link to
# their approval request.
_CALL_EVENTS = (ev.CallAdmitted, ev.ApprovalRequired)
_REQUEST_EVENTS = (ev.ApprovalRequired, ev.ApprovalDecided, ev.ApprovalLapsed, ev.WaitEnded, ev.ChangesRequested)
# A call refused (warned of, not failed in red: the run goes on), which "jump to the
# first failure" finds as it finds what failed or was denied: often the root cause.
_REFUSALS = (ev.InvalidInput, ev.ChangesRequested, ev.CheckRequired, ev.WriteBlocked, ev.SecretsFound)


def describe(event: dict[str, Any]) -> dict[str, Any]:
    """What a person sees for one event (``Event.as_dict()`` shape)."""
    payload = event["payload"] if isinstance(event.get("payload"), dict) else {}
    typed: ev.AnyEvent | None = None
    try:
        typed = ev.parse_event(event)
    except ValidationError as exc:
        # A stored row no event class reads (written by hand, or by a release whose
        # migration has not run): shown for what it is, never dropped from the trace.
        log.warning("event %s#%s (%s) does not parse: %s", event.get("run_id"), event.get("seq"), event.get("type"), exc)
        label, tone, summary = str(event.get("type")), "muted", "this event does not match its type's fields"
    else:
        label, tone, summary = _describe(typed)
    tool, args = "", None
    if isinstance(typed, ev.Proposed):
        tool, args = _proposal_parts(typed.proposal)
    elif isinstance(typed, _CALL_EVENTS):
        tool, args = typed.tool, typed.args
    elif isinstance(payload.get("tool"), str):
        tool = payload["tool"]
    links = [
        {"label": f"show full output ({ref[7:19]})", "href": reverse("runs:artifact", args=[event["run_id"], ref])}
        for ref in artifact_refs(payload)
        if ref != EMPTY_OUTPUT_REF
    ]
    if isinstance(typed, _REQUEST_EVENTS) and typed.request_id:
        links.append({"label": "open approval", "href": reverse("approvals:detail", args=[typed.request_id])})
    failure = tone == "bad" or isinstance(typed, _REFUSALS)
    return {
        "label": label,
        "tone": tone,
        "summary": summary,
        "failure": failure,
        "tool": tool,
        "args": args,
        "text_args": text_args(args),
        "links": links,
    }


def text_args(args: Any) -> list[dict[str, str]]:
    """The long or multi-line string arguments, to be read as text beside the JSON."""
    if not isinstance(args, dict):
        return []
    return [
        {"name": str(name), "text": value}
        for name, value in sorted(args.items())
        if isinstance(value, str) and ("\n" in value or len(value) > TEXT_ARG_CHARS)
    ]


def present(event: dict[str, Any]) -> dict[str, Any]:
    """An event as the trace shows it (pages, result page, live feed): its payload and
    its view with every hidden character a mark naming it (core.visible), marked here
    once, so the page's script, which sets text only, shows what is there."""
    return {**event, "payload": visible_data(event.get("payload")), "view": visible_data(describe(event))}


def group_cards(events: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Presented events grouped into timeline items: consecutive events of one tool
    call share a card, run-level events are single rows. The trace stays in seq
    order: a call whose events are interrupted by another (a kill, another call)
    continues in a new card below it, marked as continued."""
    items: list[dict[str, Any]] = []
    tools: dict[str, str] = {}
    for event in events:
        call_id = event.get("call_id")
        if not call_id:
            items.append({"call_id": None, "events": [event]})
            continue
        view = event["view"]
        card = items[-1] if items and items[-1]["call_id"] == call_id else None
        if card is None:
            card = {
                "call_id": call_id,
                "tool": tools.get(call_id, ""),
                "args": None,
                "text_args": [],
                "events": [],
                "continued": call_id in tools,
            }
            items.append(card)
        tools[call_id] = card["tool"] = card["tool"] or view["tool"]
        if card["args"] is None and view["args"] is not None:
            card["args"], card["text_args"] = view["args"], view["text_args"]
        card["events"].append(event)
    return items


def events_before(run_id: str, before_seq: int | None, limit: int) -> list[dict[str, Any]]:
    """The ``limit`` newest events before ``before_seq`` (or the newest overall), oldest first."""
    query = Event.objects.filter(run_id=run_id)
    if before_seq is not None:
        query = query.filter(seq__lt=before_seq)
    rows = list(query.order_by("-seq")[:limit])
    return [present(row.as_dict()) for row in reversed(rows)]


# The trace's filter offers every type an event can have (static/js/trace_filters.js).
EVENT_TYPES = sorted(ev.type_name(cls) for cls in get_args(ev.AnyEvent))


def timeline(run_id: str) -> dict[str, Any]:
    """The latest window of a run's trace as timeline items, and the seq range it covers
    (the page loads older events before ``first_seq`` and streams after ``last_seq``)."""
    window = events_before(run_id, None, settings.HARNESS_TRACE_WINDOW)
    return {
        "event_types": EVENT_TYPES,
        "items": group_cards(window),
        "first_seq": window[0]["seq"] if window else 1,
        "last_seq": window[-1]["seq"] if window else 0,
    }
