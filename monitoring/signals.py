"""The metrics and the traces hang off the event log like the notifications: every
stored event passes here, and is counted (and traced) once its transaction commits."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from functools import partial
from typing import Any

from django.conf import settings
from django.dispatch import receiver

from core import events as ev
from monitoring import tracing
from monitoring.event_metrics import observe
from monitoring.spans import Written
from runs.models import Event
from runs.persistence.signals import events_stored

log = logging.getLogger(__name__)


@receiver(events_stored, sender=Event, dispatch_uid="monitoring.on_events")
def on_events(
    sender: type[Event],
    rows: Sequence[Event],
    seqs: list[int],
    events: list[ev.AnyEvent],
    connection: Any,
    as_given: list[bool] | None = None,
    secrets: list[str] | None = None,
    decisions: list[dict[str, Any] | None] | None = None,
    **_: Any,
) -> None:
    if settings.HARNESS_METRICS_ENABLED:
        stored = list(zip(seqs, events, strict=True))
        connection.on_commit(partial(_observe_safely, stored))
    if tracing.enabled():
        # The rows as stored (masked), with what the writer knew of them: the typed
        # event of each row nothing was masked in, and the decisions the ledger recorded.
        writer = Written(events, as_given, secrets, decisions, seqs) if as_given is not None and secrets is not None else None
        connection.on_commit(partial(_trace_safely, rows, writer))


def _observe_safely(stored: list[tuple[int, ev.AnyEvent]]) -> None:
    try:
        observe(stored)
    except Exception:  # a figure must never break the run that wrote the events
        log.exception("could not count %d events in the metrics", len(stored))


def _trace_safely(rows: Sequence[Event], writer: Written | None) -> None:
    try:
        tracing.export(rows, writer)
    except Exception:  # a trace must never break the run that wrote the events
        log.exception("could not trace %d events", len(rows))
