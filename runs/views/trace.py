"""How run events are shown: one label, tone and one-line summary per event, and
tool calls grouped into cards. The page, the JSON endpoints and the WebSocket all
present events through ``present``, so the live stream and a reload look the same.

Everything here returns plain data; templates and the browser script escape it."""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from django.conf import settings
from django.urls import reverse

from runs.models import Event
from runs.wording import duration, human

ARTIFACT_REF = re.compile(r"sha256:[0-9a-f]{64}")
ARTIFACT_KEYS = ("artifacts", "output_ref", "artifact")
# Content-addressed: the reference of an empty output is always this one, and a
# link to it would open an empty page.
EMPTY_OUTPUT_REF = "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
REPLAY_PAGE = 500
# Colour of each run and approval status; events carry their own tone.
TONES = {
    "running": "info",
    "waiting_approval": "warn",
    "complete": "ok",
    "stopped": "bad",
    "pending": "warn",
    "granted": "ok",
    "consumed": "ok",
    "denied": "bad",
    "expired": "muted",
    "stale": "muted",
    "cancelled": "muted",
}
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


def _receipt_view(p: dict[str, Any]) -> tuple[str, str, str]:
    receipt = p.get("receipt") if isinstance(p.get("receipt"), dict) else {}
    status, effect = receipt.get("status", "?"), receipt.get("effect", "?")
    if not p.get("valid"):
        return "Receipt rejected", "bad", str(p.get("problem") or "invalid receipt")
    tone = "ok" if status == "ok" else "warn"
    return f"Receipt {status}", tone, f"effect {effect}, revision {short(receipt.get('revision'))}"


def _describe(type_: str, p: dict[str, Any]) -> tuple[str, str, str]:
    """(label, tone, summary) for one event type."""
    if type_ == "run_started":
        clipped = ", ".join(f"{k} {v['asked']}→{v['allowed']}" for k, v in (p.get("clipped") or {}).items())
        extra = f"; limits clipped by policy: {clipped}" if clipped else ""
        return (
            "Run started",
            "info",
            f"task {p.get('task_id')}, policy v{p.get('policy_version')}, revision {short(p.get('revision'))}{extra}",
        )
    if type_ == "run_resumed":
        return "Resumed", "info", str(p.get("reason", ""))
    if type_ == "proposed":
        tool, _ = _proposal_parts(p.get("proposal"))
        return f"Proposal #{p.get('number')}", "info", tool or "malformed proposal"
    if type_ == "invalid_input":
        problems = "; ".join(f"{x.get('field')}: {x.get('message')}" for x in p.get("problems") or [])
        return f"Invalid input ({p.get('gate')})", "warn", problems
    if type_ == "denied":
        return "Denied", "bad", f"{p.get('tool')} by rule '{p.get('rule')}': {p.get('reason')}"
    if type_ == "call_admitted":
        return "Admitted", "ok", f"{p.get('decision')} by rule '{p.get('rule')}' at revision {short(p.get('revision'))}"
    if type_ == "approval_required":
        return "Approval required", "warn", f"rule '{p.get('rule')}' asks a reviewer, revision {short(p.get('revision'))}"
    if type_ == "approval_consumed":
        return "Approval used", "ok", "the granted approval was consumed by this call"
    if type_ == "approval_denied":
        # The reviewer's decision is its own event (approval_decided); this is the
        # run acting on it.
        return "Call refused", "bad", "the reviewer's denial stops the run"
    if type_ == "approval_decided":
        granted = p.get("decision") == "granted"
        reason = f": {p.get('reason')}" if p.get("reason") else ""
        alone = "self-approved: the person who started the run, no second reviewer" if p.get("self_approved") else ""
        tone = ("warn" if alone else "ok") if granted else "bad"
        return f"{'Granted' if granted else 'Denied'} by {p.get('by')}", tone, "; ".join(x for x in (alone, reason[2:]) if x)
    if type_ == "approval_lapsed":
        return f"Approval {human(p.get('status'))}", "warn", str(p.get("reason", ""))
    if type_ == "wait_ended":
        waited = p.get("waited_seconds")
        after = f"after {duration(waited)} waiting; " if isinstance(waited, int | float) and waited else ""
        goes_on = "the run continues" if p.get("run") == "running" else "the run stops"
        reason = f": {p.get('reason')}" if p.get("reason") else ""
        return f"Wait over: {human(p.get('exit'))}", "ok" if p.get("run") == "running" else "bad", f"{after}{goes_on}{reason}"
    if type_ == "duplicate":
        return "Already done", "warn", f"{p.get('tool')} was already {p.get('status')} by call {p.get('of_call')}: nothing performed again"
    if type_ == "policy_changed":
        return "Policy changed", "info", f"the gates decide under policy v{p.get('new_version')} now (was v{p.get('old_version')})"
    if type_ == "invariant_repaired":
        return "Repaired", "warn", f"{p.get('invariant')}: {p.get('repair')}"
    if type_ == "kill_requested":
        whom = "this run" if p.get("scope") == "run" else "every active run (Stop all runs)"
        why = f": {p.get('reason')}" if p.get("reason") else ""
        return "Kill requested", "bad", f"by {p.get('by')} for {whom}{why}"
    if type_ == "call_started":
        return f"Started, attempt {p.get('attempt')}", "info", str(p.get("tool", ""))
    if type_ == "receipt":
        return _receipt_view(p)
    if type_ == "retry":
        return "Retry", "warn", f"attempt {p.get('attempt')} after {p.get('backoff_seconds')}s: {p.get('reason')}"
    if type_ == "sandbox_waiting":
        return "Waiting for the sandbox engine", "warn", str(p.get("reason", ""))
    if type_ == "sandbox_wait_over":
        if p.get("engine_back"):
            return "Sandbox engine back", "ok", f"after {p.get('waited_seconds')}s"
        return "Gave up waiting for the sandbox engine", "bad", f"after {p.get('waited_seconds')}s: {p.get('detail')}"
    if type_ == "evidence_recorded":
        verdict = "passed" if p.get("passed") else "failed"
        current = "current" if p.get("current") else "not current"
        return (
            f"Check {p.get('check_id')} {verdict}",
            "ok" if p.get("passed") else "bad",
            (f"exit {p.get('exit_code')} on revision {short(p.get('revision'))} ({current})"),
        )
    if type_ == "evidence_cleared":
        return "Evidence cleared", "warn", f"revision {short(p.get('old_revision'))} → {short(p.get('revision'))}; re-check needed"
    if type_ == "check_required":
        missing = ", ".join(p.get("missing") or [])
        return "Check required", "warn", f"{p.get('for_tool')} needs a passing {missing} on revision {short(p.get('revision'))}"
    if type_ == "pending_effect":
        return "Pending effect", "bad", f"{p.get('tool')} ({p.get('kind')}): {p.get('reason')}"
    if type_ == "effect_reconciled":
        return "Effect reconciled", "ok", f"{'applied' if p.get('applied') else 'not applied'}: {p.get('detail')}"
    if type_ == "write_blocked":
        return "Write blocked", "warn", f"{p.get('tool')} waits for unresolved effects: {', '.join(p.get('pending') or [])}"
    if type_ == "model":
        return f"Model {p.get('kind')}", "muted", ", ".join(f"{k}={v}" for k, v in (p.get("detail") or {}).items())[:300]
    if type_ == "stop":
        if p.get("status") == "complete":
            return "Complete", "ok", str(p.get("message", ""))
        return f"Stopped: {human(p.get('status'))}", "bad", str(p.get("message", ""))
    return type_, "muted", ""


def describe(event: dict[str, Any]) -> dict[str, Any]:
    """What a person sees for one event (``Event.as_dict()`` shape)."""
    payload = event["payload"] if isinstance(event.get("payload"), dict) else {}
    type_ = event["type"]
    label, tone, summary = _describe(type_, payload)
    tool, args = "", None
    if type_ == "proposed":
        tool, args = _proposal_parts(payload.get("proposal"))
    elif type_ in ("call_admitted", "approval_required"):
        tool, args = str(payload.get("tool", "")), payload.get("args")
    elif isinstance(payload.get("tool"), str):
        tool = payload["tool"]
    links = [
        {"label": f"show full output ({ref[7:19]})", "href": reverse("runs:artifact", args=[event["run_id"], ref])}
        for ref in artifact_refs(payload)
        if ref != EMPTY_OUTPUT_REF
    ]
    if type_ in ("approval_required", "approval_decided", "approval_lapsed", "wait_ended") and payload.get("request_id"):
        links.append({"label": "open approval", "href": reverse("approvals:detail", args=[payload["request_id"]])})
    return {"label": label, "tone": tone, "summary": summary, "tool": tool, "args": args, "text_args": text_args(args), "links": links}


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
    return {**event, "view": describe(event)}


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


def stored_events_after(run_id: str, after_seq: int, limit: int = REPLAY_PAGE) -> list[dict[str, Any]]:
    """Stored events after ``after_seq`` as the broadcast carries them (not presented)."""
    rows = Event.objects.filter(run_id=run_id, seq__gt=after_seq).order_by("seq")[:limit]
    return [row.as_dict() for row in rows]


def events_before(run_id: str, before_seq: int | None, limit: int) -> list[dict[str, Any]]:
    """The ``limit`` newest events before ``before_seq`` (or the newest overall), oldest first."""
    query = Event.objects.filter(run_id=run_id)
    if before_seq is not None:
        query = query.filter(seq__lt=before_seq)
    rows = list(query.order_by("-seq")[:limit])
    return [present(row.as_dict()) for row in reversed(rows)]


def timeline(run_id: str) -> dict[str, Any]:
    """The latest window of a run's trace as timeline items, and the seq range it covers
    (the page loads older events before ``first_seq`` and streams after ``last_seq``)."""
    window = events_before(run_id, None, settings.HARNESS_TRACE_WINDOW)
    return {
        "items": group_cards(window),
        "first_seq": window[0]["seq"] if window else 1,
        "last_seq": window[-1]["seq"] if window else 0,
    }
