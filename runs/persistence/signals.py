"""Signals other apps listen to instead of reaching into the event writer."""

from collections.abc import Callable

from django.dispatch import Signal

from core.events import Event

# Sent by runs.persistence.eventlog.append_events inside the transaction that stores the events,
# with ``rows``: the stored runs.models.Event rows, seq assigned (each made when it is
# first read: runs.persistence.eventlog.StoredRows), ``seqs``: their seqs, and ``events``: the
# same events as the typed core.events objects they were stored from (unmasked);
# ``as_given``: for each row, whether its payload is its event's own (nothing in it was
# masked), so that its event reads as the row would but for ``ts``, which the row holds
# to the microsecond; ``secrets``: the secret values they were masked with
# (common.redact.secret_values); ``decisions``: each row's decision as the ledger
# recorded it (runs.persistence.decisions.decision_of) or None, in order; ``connection``:
# the default database's connection they were stored through (its ``on_commit`` is
# ``transaction.on_commit``'s, without looking the connection up again).
# Its receivers are connected once, at start-up: each send takes them from the
# signal's cache (rebuilt on any connect or disconnect) instead of filtering the
# receivers under a lock again, twice a durable step.
events_stored = Signal(use_caching=True)

# Whether a listener of ``events_stored`` may write or lock a row for an event in the
# transaction that stores it: a notification's rows, a mail's row it locks
# (notifications.mail). Every such listener adds its test here; reading, and work handed
# to ``on_commit``, need none. A checkpoint none of whose events any test names writes its
# decisions' ledger entries in the statement that stores the events, which locks the
# ledger's heads before the listeners run (ledger.writer.joining): a listener locking a
# row then could wait on a transaction that waits for those heads. And on PostgreSQL such
# a checkpoint of a run that goes on is that one statement, sent alone as its own
# transaction (runs.persistence.eventlog, ``alone``): its listeners run once it has
# committed, and what they hand to ``on_commit`` runs at once, as it would have run
# after the COMMIT.
locks_after: list[Callable[[Event], bool]] = []
