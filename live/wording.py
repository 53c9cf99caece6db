"""The words a person reads for a status or a stop reason. Pages show these; the raw
id stays in the API, the event log and the tooltip (``title``) beside each word."""

from __future__ import annotations

LABELS = {
    # runs
    "running": "running",
    "waiting_approval": "waiting for approval",
    "complete": "complete",
    "stopped": "stopped",
    # why a run stopped
    "killed": "killed",
    "denied": "denied",
    "tool_denied": "tool not allowed",
    "deadline": "out of time",
    "attempt_limit": "out of attempts",
    "budget_exhausted": "out of budget",
    "proposals_exhausted": "out of proposals",
    "calls_exhausted": "out of tool calls",
    "receipt_invalid": "invalid receipt",
    "unresolved": "unresolved effect",
    "model_error": "model error",
    "approval_expired": "approval expired",
    "approval_cancelled": "approval cancelled",
    "sandbox_unavailable": "sandbox unavailable",
    "workspace_error": "workspace could not be prepared",
    "revision_mismatch": "workspace revision did not verify",
    "workspace_lost": "workspace could not be rebuilt",
    "unstorable": "a value could not be stored",
    # approval requests
    "pending": "waiting for a decision",
    "granted": "granted",
    "consumed": "granted and used",
    "expired": "expired",
    "stale": "out of date",
    "cancelled": "cancelled",
}


def human(value: object) -> str:
    """The reader's word for a status or stop reason; an id this table does not know
    yet is shown with spaces for underscores rather than not at all."""
    text = str(value or "")
    return LABELS.get(text, text.replace("_", " "))


def duration(seconds: float) -> str:
    """A length of time as a person reads it, as the pages' script writes it too
    (static/js/harness.js): 42s, 3m 05s, 2h 04m."""
    total = max(0, int(seconds))
    hours, minutes, secs = total // 3600, total % 3600 // 60, total % 60
    if hours:
        return f"{hours}h {minutes:02d}m"
    if minutes:
        return f"{minutes}m {secs:02d}s"
    return f"{secs}s"
