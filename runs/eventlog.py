"""The one function that writes run events.

``append_events`` numbers events under the run row's lock, redacts them, stores
them and broadcasts them only after the surrounding transaction commits, so a
viewer never sees an event the database does not have."""

from __future__ import annotations

import time
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from django.db import transaction

from runs.broadcast import broadcast_events
from runs.core.events import Event as CoreEvent
from runs.models import Event, Run
from runs.redact import redact, secret_values
from runs.signals import events_stored


def append_event(run_id: str, cls: type[CoreEvent], **fields: Any) -> Event:
    """Store one event written outside the loop (a decision, a kill); its seq is
    assigned here like any other."""
    [row] = append_events(run_id, [cls(run_id=str(run_id), seq=0, ts=time.time(), **fields)])
    return row


def append_events(run_id: str, events: Sequence[CoreEvent]) -> list[Event]:
    """Store events for a run; returns the rows with their assigned ``seq``."""
    if not events:
        return []
    secrets = secret_values()
    # The row lock serialises every writer of this run's log (worker, reviewers,
    # the beat), so seq stays gap-free and unique without retry loops.
    with transaction.atomic(savepoint=False):
        run = Run.objects.select_for_update().only("id", "last_seq").get(pk=run_id)
        rows = []
        for offset, event in enumerate(events, start=1):
            data = event.model_dump()
            rows.append(
                Event(
                    run_id=run.id,
                    seq=run.last_seq + offset,
                    type=data["type"],
                    call_id=event.call_id,
                    ts=datetime.fromtimestamp(event.ts, tz=UTC),
                    payload=redact(event.payload(), secrets),
                )
            )
        Event.objects.bulk_create(rows)
        # Listeners (webhook notifications) record what they need in this same
        # transaction, so it commits or rolls back with the events.
        events_stored.send(sender=Event, rows=rows)
        Run.objects.filter(pk=run.id).update(last_seq=run.last_seq + len(rows))
        payloads = [row.as_dict() for row in rows]
        transaction.on_commit(lambda: broadcast_events(str(run_id), payloads))
    return rows
