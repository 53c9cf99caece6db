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


def duration(seconds: object) -> str:
    """A length of time as a person reads it: 42 s, 3 min 5 s, 2 h 4 min."""
    try:
        total = round(float(seconds))  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return str(seconds)
    if total < 60:
        return f"{total} s"
    if total < 3600:
        return f"{total // 60} min {total % 60} s" if total % 60 else f"{total // 60} min"
    return f"{total // 3600} h {total % 3600 // 60} min"
