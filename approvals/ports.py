"""What approvals need of runs, as a port. A request belongs to a run: deciding it writes
an event into the run's log, and whether it is stale depends on where the run is now.
Runs are the layer above (their loop files the requests), so approvals cannot import
them; runs implement this port (``runs.runtime.RunsForApprovals``) and connect it when
their app is ready (``runs.apps``). Like the core's ports, it keeps the dependency
explicit and typed while pointing downwards only.

The request's ForeignKey to its run stays the string reference ``"runs.Run"``: reading
``request.run`` needs no import; what approvals know of a run beyond that row comes
through here."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from django.contrib.auth.models import User
from django.db.models import Q

from core import events as ev
from core.fences import Fence


@dataclass(frozen=True)
class RunStanding:
    """Where a run is now, as a request's staleness reads it."""

    revision: str  # the workspace revision of the run's state
    waiting: bool  # waiting for an approval
    stopping: bool  # a kill was requested
    outcome: str


class Runs(Protocol):
    def append_event(self, run_id: str, cls: type[ev.Event], *, fence: Fence, **fields: Any) -> None:
        """Write one event (a decision, a lapse) into the run's log, in the caller's
        transaction, behind ``fence``; viewers are told after it commits."""

    def standing(self, run_id: str) -> RunStanding:
        """The run as the database has it now (not a row loaded earlier)."""

    def waiting_for_decision(self) -> Q:
        """On ApprovalRequest: its run waits for a decision, is not being stopped, and is
        at the revision the request was asked for."""


class OwnedRun(Protocol):
    """The run an approval gate files requests for: its owner is the requester."""

    @property
    def created_by(self) -> User | None: ...


_runs: Runs | None = None


def connect_runs(runs: Runs) -> None:
    global _runs
    _runs = runs


def runs() -> Runs:
    if _runs is None:
        raise RuntimeError("approvals used before runs connected to them (runs.apps.RunsConfig.ready)")
    return _runs
