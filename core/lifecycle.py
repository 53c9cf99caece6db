"""The run's life around humans and effects (docs/design.md, Lifecycle), as data.

A run is ``running``, ``waiting_approval`` or stopped with an outcome. A wait ends
in exactly one of the ways of ``WAIT_EXITS``; each says what becomes of the request,
of the run, and of the call that waited. ``REQUEST_TRANSITIONS`` are the only status
changes an approval request may make. The loop (``core.loop``) and the approvals
service both follow these tables, and every transition they make is an event."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

RequestStatus = Literal["pending", "granted", "consumed", "denied", "changes_requested", "expired", "stale", "cancelled"]
WaitExit = Literal["granted", "denied", "changes_requested", "expired", "stale", "cancelled"]
RunAfter = Literal["running", "stopped"]

# A request that can still be decided (pending) or used (granted).
OPEN_STATUSES: tuple[RequestStatus, ...] = ("pending", "granted")
# What a request that ends without being used can end as.
LAPSES: tuple[RequestStatus, ...] = ("expired", "stale", "cancelled")

REQUEST_TRANSITIONS: dict[str, frozenset[str]] = {
    "pending": frozenset({"granted", "denied", "changes_requested", *LAPSES}),
    # A grant the run can no longer use ends stale, expired or cancelled, never consumed.
    "granted": frozenset({"consumed", *LAPSES}),
    "consumed": frozenset(),
    "denied": frozenset(),
    "changes_requested": frozenset(),
    "expired": frozenset(),
    "stale": frozenset(),
    "cancelled": frozenset(),
}


@dataclass(frozen=True)
class Exit:
    """One way out of ``waiting_approval``, as ``core.waits`` follows it. A run
    that goes on takes the waiting call back through the gates (authorize, evidence,
    approval) under the policy now in force: with the grant it consumed when the
    request ends ``consumed``, else without one (so it is asked again, runs, or is
    refused), except after a reviewer's "request changes": that call is not
    performed, and its step ends with the reviewer's words to the model. A run that
    stops fails the call."""

    request: RequestStatus  # what the request is once the wait has ended this way
    run: RunAfter
    outcome: str | None  # the stop outcome when the run stops (None: the stop's own reason)


WAIT_EXITS: dict[WaitExit, Exit] = {
    # The grant is consumed by the call, which runs unless the gates now refuse it.
    "granted": Exit("consumed", "running", None),
    # The run stops with the reviewer's reason.
    "denied": Exit("denied", "stopped", "denied"),
    # The reviewer wrote to the model instead: the call is not performed, the run goes
    # on, and the identical call is not asked for again.
    "changes_requested": Exit("changes_requested", "running", None),
    # Nobody decided in time. The lead chose stopping over an operator's "ask again":
    # a request nobody decided in time is an answer too, and a stopped run is a state
    # nobody has to guess about.
    "expired": Exit("expired", "stopped", "approval_expired"),
    # The revision or the policy changed: the call goes back through the gates
    # without a grant (check_required, a new request, the call itself, or a denial).
    "stale": Exit("stale", "running", None),
    # The run was stopped (kill, deadline, global stop): the request leaves the queue.
    "cancelled": Exit("cancelled", "stopped", None),
}

# How a request found in each status ends the wait of the call that filed it.
EXIT_OF_STATUS: dict[str, WaitExit] = {
    "granted": "granted",
    "consumed": "granted",
    "denied": "denied",
    "changes_requested": "changes_requested",
    "expired": "expired",
    "stale": "stale",
    "cancelled": "cancelled",
}
# A request found cancelled while the run itself was not stopping.
CANCELLED_OUTCOME = "approval_cancelled"


class IllegalTransition(ValueError):
    pass


def check_request_transition(old: str, new: str) -> None:
    allowed = REQUEST_TRANSITIONS.get(old)
    if allowed is None or new not in allowed:
        raise IllegalTransition(f"an approval request cannot go from {old} to {new}")


def check_lapse(new: str) -> None:
    """A lapse ends an open request, pending or granted and not yet used, without a
    decision: ``new`` must be one of ``LAPSES`` and reachable from either."""
    if new not in LAPSES:
        raise IllegalTransition(f"{new} is not a way for an approval request to lapse (one of {', '.join(LAPSES)})")
    for old in OPEN_STATUSES:
        check_request_transition(old, new)


def sources_of(new: str) -> list[str]:
    """The statuses a request may be in to move to ``new`` (for conditional UPDATEs)."""
    return [old for old, targets in REQUEST_TRANSITIONS.items() if new in targets]


def exit_of(status: str) -> WaitExit | None:
    """The way out of a wait that a request in ``status`` means; None while pending."""
    return EXIT_OF_STATUS.get(status)
