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
from notifications.channels import CHANNELS, Channel, Interest
from runs.models import Event
from runs.persistence.signals import events_stored, locks_after

log = logging.getLogger(__name__)


# The channels that may care about an event of a type, found with its first event: a
# channel that answers NEVER is not asked again of the type, so an event of a type no
# channel cares about (most of a step's) costs a dictionary look.
_ASKED: dict[type[ev.Event], tuple[Channel, ...]] = {}


def _interested(event: ev.AnyEvent) -> list[Channel]:
    """The channels ``event`` may call for something sent by, in CHANNELS' order."""
    asked = _ASKED.get(type(event))
    if asked is None:
        asked = _ASKED[type(event)] = tuple(channel for channel in CHANNELS if channel.interest(event) is not Interest.NEVER)
    return [channel for channel in asked if channel.interest(event) is Interest.YES]


def _records(event: ev.Event) -> bool:
    """Whether a notification may be recorded for ``event``, which locks rows (a
    waiting mail's: notifications.mail; an endpoint's, by its delivery's key)."""
    if _ASKED.get(type(event)) == ():
        return False
    # Every stored event is of one of AnyEvent's types.
    return bool(_interested(cast(ev.AnyEvent, event)))


locks_after.append(_records)


@receiver(events_stored, sender=Event, dispatch_uid="notifications.on_events")
def on_events(sender: type[Event], rows: Sequence[Event], events: list[ev.AnyEvent], **_: Any) -> None:
    for index, typed in enumerate(events):
        # Most events call for no notification; they cost the step no savepoint (and no
        # parse of the stored row, nor its model instance: the typed event it was written
        # from is at hand).
        if _ASKED.get(type(typed)) == ():
            continue
        for channel in _interested(typed):
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
