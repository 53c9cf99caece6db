"""What a notification says, as plain data: which events notify, the JSON
payload, the Slack-compatible rendering, and the signature. No Django here
(events come typed from core.events)."""

from __future__ import annotations

import hashlib
import hmac
import json
from typing import Any, assert_never

from core import events as ev
from core.outcome import at_stop
from core.visible import visible_text

APPROVAL_REQUESTED = "approval_requested"
APPROVAL_EXPIRED = "approval_expired"
RUN_STOPPED = "run_stopped"
OBJECTIVE_CHARS = 300


# The event types the last case below matched: none of theirs ever notifies (the cases
# before it test the type alone), so each is told by one look-up (and the webhooks'
# channel tells the listener so: notifications.channels). A class pattern that
# fails is an isinstance against a pydantic model's class (ABCMeta's check), and most of
# a step's events failed a dozen of them here.
SILENT: set[type[ev.Event]] = set()


def kind_of(event: ev.AnyEvent) -> str | None:
    """The notification an event calls for, if any. Every event type is named here,
    so a new one is a type error until someone decides whether it notifies."""
    if type(event) in SILENT:
        return None
    match event:
        case ev.ApprovalRequired():
            return APPROVAL_REQUESTED
        case ev.ApprovalLapsed():
            return APPROVAL_EXPIRED if event.status == "expired" else None
        case ev.Stopped():
            return RUN_STOPPED
        case (
            ev.RunStarted()
            | ev.RunResumed()
            | ev.Proposed()
            | ev.InvalidInput()
            | ev.Denied()
            | ev.SecretsFound()
            | ev.CallAdmitted()
            | ev.ApprovalConsumed()
            | ev.ApprovalRefused()
            | ev.ApprovalDecided()
            | ev.ChangesRequested()
            | ev.WaitEnded()
            | ev.DuplicateEffect()
            | ev.PolicyChanged()
            | ev.InvariantRepaired()
            | ev.KillRequested()
            | ev.CallStarted()
            | ev.ReceiptRecorded()
            | ev.Retry()
            | ev.SandboxWaiting()
            | ev.SandboxWaitOver()
            | ev.EgressConnection()
            | ev.EgressConnectionsOmitted()
            | ev.EvidenceRecorded()
            | ev.EvidenceCleared()
            | ev.WorkspaceChanged()
            | ev.CheckRequired()
            | ev.PendingEffectRecorded()
            | ev.EffectReconciled()
            | ev.WriteBlocked()
            | ev.ModelNote()
            | ev.AgentStarted()
            | ev.AgentEnded()
        ):
            SILENT.add(type(event))
            return None
        case _:
            assert_never(event)


def notice(
    *,
    delivery_id: str,
    kind: str,
    run: dict[str, Any],
    event: dict[str, Any],
    base_url: str,
) -> dict[str, Any]:
    """The JSON payload. ``run`` has id, task_id, objective; ``event`` is the stored
    event (seq, type, ts, call_id, payload), already redacted by the event writer.
    Tool arguments are left out: reviewers read them where they decide."""
    body: dict[str, Any] = {
        "id": delivery_id,
        "kind": kind,
        "run": {
            "id": run["id"],
            "task_id": run["task_id"],
            "objective": run["objective"][:OBJECTIVE_CHARS],
            "url": f"{base_url}/runs/{run['id']}/",
            "api_url": f"{base_url}/api/runs/{run['id']}/",
        },
        "event": {"seq": event["seq"], "type": event["type"], "ts": event["ts"], "call_id": event["call_id"]},
    }
    typed = ev.parse_event(event)
    if isinstance(typed, ev.ApprovalRequired | ev.ApprovalLapsed):
        approval: dict[str, Any] = {
            "id": typed.request_id,
            "url": f"{base_url}/approvals/{typed.request_id}/",
            "api_url": f"{base_url}/api/approvals/{typed.request_id}/",
        }
        if isinstance(typed, ev.ApprovalRequired):
            approval |= {"tool": typed.tool, "rule": typed.rule, "revision": typed.revision}
        else:
            approval |= {"reason": typed.reason}
        body["approval"] = approval
    elif isinstance(typed, ev.Stopped):
        # The outcome as every surface tells it (core.outcome); a stop recorded before
        # outcomes were told has its status for both.
        body["stop"] = {
            "status": typed.status,
            "message": typed.message,
            "outcome": typed.outcome or typed.status,
            "said": typed.said or at_stop(typed.status, typed.message).sentence,
        }
    else:
        raise ValueError(f"a {typed.type} event calls for no notification")
    # The text is words for a person (plain webhooks and Slack alike): every hidden
    # character a mark naming it (core.visible); the fields above stay data.
    body["text"] = visible_text(summary(body))
    return body


def summary(body: dict[str, Any]) -> str:
    run = body["run"]
    where = f"run {run['task_id']} ({run['id'][:8]})"
    if body["kind"] == APPROVAL_REQUESTED:
        approval = body["approval"]
        return f"Approval needed: {approval['tool']} in {where}, because {approval['rule']}."
    if body["kind"] == APPROVAL_EXPIRED:
        return f"An approval request in {where} expired without a decision."
    return f"{where.capitalize()}: {body['stop']['said']}."


def slack(body: dict[str, Any]) -> dict[str, Any]:
    """A Slack incoming-webhook message (also understood by Mattermost and others)."""
    link = body["approval"]["url"] if "approval" in body else body["run"]["url"]
    return {
        # The top-level text is the notification's fallback rendering: escaped like the block.
        "text": _slack_escape(body["text"]),
        "blocks": [
            {"type": "section", "text": {"type": "mrkdwn", "text": _slack_escape(body["text"])}},
            {
                "type": "context",
                "elements": [{"type": "mrkdwn", "text": f"<{link}|{body['kind']}> · event {body['event']['seq']} · {body['id']}"}],
            },
        ],
    }


def _slack_escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def encode(body: dict[str, Any]) -> bytes:
    return json.dumps(body, separators=(",", ":"), sort_keys=True, ensure_ascii=False).encode()


def signature(secret: str, timestamp: str, raw_body: bytes) -> str:
    """``sha256=<hex>`` of HMAC-SHA256 over ``<timestamp>.<raw body>``: the timestamp
    is signed too, so a receiver can refuse replays of old requests."""
    mac = hmac.new(secret.encode(), timestamp.encode() + b"." + raw_body, hashlib.sha256)
    return f"sha256={mac.hexdigest()}"


def backoff_seconds(attempts: int, base: float, cap: float) -> float:
    """Wait before attempt ``attempts + 1``: base, 2*base, 4*base... up to cap."""
    return float(min(cap, base * 2 ** (attempts - 1)))


RETRYABLE_STATUS = frozenset({408, 425, 429})


def retryable(status_code: int | None) -> bool:
    """A network failure, a server error or a "slow down" is worth another try; any
    other refusal will not change by asking again."""
    return status_code is None or status_code >= 500 or status_code in RETRYABLE_STATUS
