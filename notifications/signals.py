"""Notifications hang off the event log: every stored event passes here, in the
transaction that stores it, and each channel (notifications.channels) records what
it will send."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from functools import partial
from typing import Any, cast

from django.db import transaction
from django.dispatch import receiver

from core import events as ev
from notifications.channels import CHANNELS
from runs.models import Event
from runs.persistence.signals import events_stored, locks_after

log = logging.getLogger(__name__)


def _records(event: ev.Event) -> bool:
    """Whether a notification may be recorded for ``event``, which locks rows (a
    waiting mail's: notifications.mail; an endpoint's, by its delivery's key)."""
    # Every stored event is of one of AnyEvent's types.
    typed = cast(ev.AnyEvent, event)
    return any(channel.interested(typed) for channel in CHANNELS)


locks_after.append(_records)


@receiver(events_stored, sender=Event, dispatch_uid="notifications.on_events")
def on_events(sender: type[Event], rows: Sequence[Event], events: list[ev.AnyEvent], **_: Any) -> None:
    for index, typed in enumerate(events):
        for channel in CHANNELS:
            # Most events call for no notification; they cost the step no savepoint (and
            # no parse of the stored row, nor its model instance: the typed event it was
            # written from is at hand).
            if not channel.interested(typed):
                continue
            row = rows[index]
            try:
                # A savepoint: a failure here is rolled back alone and never costs the run
                # its event, which is the audit record.
                with transaction.atomic():
                    ids = channel.record(row, typed)
            except Exception:  # a notification must never break the event writer
                log.exception("could not record %s notifications for event %s", channel.name, row)
                continue
            for row_id in ids:
                transaction.on_commit(partial(channel.enqueue, row_id))
