"""Signals other apps listen to instead of reaching into the event writer."""

from django.dispatch import Signal

# Sent by runs.persistence.eventlog.append_events inside the transaction that stores the events,
# with ``rows``: the stored runs.models.Event rows, seq assigned, and ``events``: the
# same events as the typed core.events objects they were stored from (unmasked).
events_stored = Signal()
