"""Who writes a run's event log, and what keeps out a writer that may no longer
(docs/design.md, Recovery). Every write names one of these; ``runs.persistence.eventlog.append_events``
turns it into the WHERE clause of the UPDATE that numbers the events. Plain values, so
the approvals side (which imports only the core of runs) can carry the one its caller
holds."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Lease:
    """The worker driving the run, for as long as ``token`` is still the run's lease
    token: its checkpoints, the notifications of its executor and the approval lapses
    of its loop."""

    token: int


@dataclass(frozen=True)
class RowLock:
    """A writer that does not drive the run (``writer`` says who: a reviewer's
    decision, an operator's kill, the beat's expiry or repair, the run's creation)."""

    writer: str


Fence = Lease | RowLock


def driver_fence(lease_token: int | None) -> Fence:
    """The fence of whoever drives a run: its lease, or, for a driver that holds none
    (a test's or a bench's single driver), only the row lock."""
    return RowLock("a driver without a lease") if lease_token is None else Lease(lease_token)
