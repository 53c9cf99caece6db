"""The words a person reads for a status or a stop reason. Pages show these; the raw
id stays in the API, the event log and the tooltip (``title``) beside each word."""

from __future__ import annotations

from core.outcome import WORDS

# A run's outcomes and stop reasons are core.outcome's words, told the same on every
# surface; an approval request's statuses are these.
LABELS = {
    **WORDS,
    "pending": "waiting for a decision",
    "granted": "granted",
    "consumed": "granted and used",
    "expired": "expired",
    "stale": "out of date",
    "cancelled": "cancelled",
    "changes_requested": "changes requested",
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
