"""The interfaces the loop talks through. Django, Docker and model providers sit
behind these; tests plug in simple doubles."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol, runtime_checkable

from core.effects import Plan
from core.events import Event
from core.feedback import Feedback
from core.jsonutil import JSON
from core.policy import CheckDef, Policy, Reviewers
from core.state import PendingEffect, RunState


@dataclass(frozen=True)
class Call:
    """One execution attempt as the executor sees it (already validated and admitted)."""

    run_id: str
    call_id: str
    tool: str
    tool_version: str
    args: Mapping[str, JSON]
    attempt: int
    idempotency_key: str | None
    max_output_bytes: int
    check: CheckDef | None = None
    # The run's deadline (the clock's time): an executor that waits for its
    # infrastructure (a sandbox engine coming back) waits no longer than this.
    deadline: float | None = None
    # An external call's effect as it was fixed and approved (core.effects): the
    # executor performs exactly this, never what its own settings would make.
    effect: Mapping[str, JSON] | None = None


@dataclass(frozen=True)
class Reconciliation:
    resolved: bool
    applied: bool | None
    authoritative: bool
    detail: str
    # The lookup found the effect's target changed by someone else (a branch at
    # another commit): neither applied nor retryable, so the run stops.
    conflict: bool = False


class Executor(Protocol):
    def execute(self, call: Call) -> object:
        """Run one attempt and return a receipt (checked by the harness, never trusted)."""

    def reconcile(self, effect: PendingEffect) -> Reconciliation:
        """Find out whether an effect of unknown outcome happened (by idempotency key)."""


class RevisionMismatch(Exception):
    """The workspace's maintained revision disagrees with a full walk of its tree (or
    can no longer be read): nothing it vouched for can be trusted, so the run stops
    (``revision_mismatch``) instead of going on with an unverified value."""


class Workspace(Protocol):
    def revision(self) -> str:
        """The content hash of the workspace, computed by trusted code. Raises
        RevisionMismatch when that value fails its verification."""

    def verify(self) -> str:
        """The revision as a full read of the workspace finds it, which must agree with
        ``revision()`` (RevisionMismatch otherwise). Costs the size of the workspace:
        for when a run is picked up, not for every call."""

    def picked_up(self) -> str:
        """The revision a worker relies on as it picks the run up: ``verify()``, except
        right after this worker made the workspace (prepared it from its source, or
        rebuilt it and walked it) with nothing written or run in it since, when that
        making proved the value and a second read would only repeat it."""

    def preview(self, tool: str, args: Mapping[str, JSON]) -> str | None:
        """A unified diff of what a write would change, for reviewers."""

    def sources(self, tool: str, args: Mapping[str, JSON]) -> Mapping[str, str]:
        """The text of each file a write would change, as it is now (the old side of
        ``preview``'s diff), for reviewers to read around its hunks; a file too large
        or not text is left out."""

    def plan(self, tool: str, args: Mapping[str, JSON], idempotency_key: str, at: float) -> Plan | None:
        """The effect an external call would have, fixed now and dated ``at`` (epoch
        seconds; core.effects), and what a reviewer is shown of it; None for a
        tool that has no such effect here."""


@dataclass(frozen=True)
class ApprovalAsk:
    run_id: str
    call_id: str
    tool: str
    args: Mapping[str, JSON]
    revision: str
    policy_version: int
    key: str
    rule: str
    actor: str
    diff: str | None
    evidence: Sequence[Mapping[str, JSON]] = field(default_factory=tuple)
    # The old side of each file the diff changes, read at ``revision`` with the diff:
    # what a reviewer expands the context around a hunk from.
    sources: Mapping[str, str] = field(default_factory=dict)
    # The external effect granting performs, fixed when the request is filed.
    effect: Mapping[str, JSON] | None = None
    # The core bounds the request's life by the policy's TTL and what is left of the
    # policy's limit on waiting, so no reviewer is offered a grant the run cannot use.
    expires_in_seconds: float = 3600.0
    # Who decides and how many must grant (the asking rule's).
    reviewers: Reviewers = Reviewers()


@dataclass(frozen=True)
class Filed:
    request_id: str
    new: bool


@dataclass(frozen=True)
class RequestState:
    request_id: str
    status: str  # core.lifecycle.RequestStatus
    reason: str = ""
    consumed_by_call: str = ""
    due: bool = False  # still open but past its expiry
    decided_by: str = ""  # who decided it, if a person did


class ApprovalGate(Protocol):
    """Approval requests as the loop sees them. Every status change the gate makes
    follows core.lifecycle.REQUEST_TRANSITIONS and is recorded as an event."""

    def request(self, ask: ApprovalAsk) -> Filed:
        """File a request for exactly this key, or return the pending one already filed."""

    def state(self, request_id: str) -> RequestState: ...

    def consume(self, request_id: str, call_id: str) -> bool:
        """Use a granted request once (atomically: of concurrent consumers one wins)."""

    def lapse(self, request_id: str, status: Literal["expired", "stale"], reason: str) -> bool:
        """End an open request that can no longer be decided or used."""

    def cancel_open(self, run_id: str, reason: str) -> list[str]:
        """Cancel every open request of a run that stopped; their ids."""


class PolicySource(Protocol):
    def current(self) -> Policy:
        """The server policy now in force (the newest version)."""


class Store(Protocol):
    def checkpoint(self, state: RunState, events: Sequence[Event]) -> None:
        """Persist the state and the step's events together, or neither."""


class ArtifactStore(Protocol):
    def put(self, content: bytes, media_type: str) -> str:
        """Store content; return its reference (content-addressed)."""


class ProposerStopped(Exception):
    """The proposer cannot go on: its token/cost budget is used up, or the model
    provider refused the request for good (authentication, bad request)."""

    def __init__(self, reason: Literal["budget_exhausted", "model_error"], message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


class Proposer(Protocol):
    def propose(self, feedback: Feedback | None) -> object | None:
        """The next raw proposal, given what became of the last one (None before the
        first), or None when the proposer has nothing more. May raise ProposerStopped."""

    def snapshot(self) -> dict[str, JSON]:
        """Position/conversation to persist so a reload continues exactly here."""

    def refused(self) -> None:
        """The proposal just returned was refused by the gates (parse, resolve,
        validate): keep of it no more than the run does (a summary when it is large,
        core.proposals.kept), before the checkpoint that records the refusal."""

    def notes(self) -> list[dict[str, JSON]]:
        """What happened talking to the model since the last call (usage, retries,
        errors); each becomes a ``model`` event. Drained on read."""


class Controls(Protocol):
    def kill_requested(self) -> bool: ...


@runtime_checkable
class SaysWhoKilled(Controls, Protocol):
    """Controls that know who asked for the kill and why: the stop then says so (an
    operator's kill is a decision, told with its author like any other)."""

    def killed_by(self) -> str:
        """E.g. "killed by rita: wrong branch"; empty when nobody is known."""
        ...


class Clock(Protocol):
    def now(self) -> float: ...

    def sleep(self, seconds: float) -> None: ...


class SystemClock:
    def now(self) -> float:
        return time.time()

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)


class NoControls:
    def kill_requested(self) -> bool:
        return False
