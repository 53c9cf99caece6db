"""Everything a run needs to continue after a crash, as one JSON-serialisable
object. The store saves it with the step's events in one transaction.

The stored object carries ``schema_version``. A release that changes the shape
raises ``SCHEMA_VERSION`` and adds the step from the previous version to
``UPGRADES``; ``load_stored_state`` applies the steps in order on load, so runs in
flight (a wait can last days) survive the release. A state written by a newer
release is refused, never guessed at (docs/design.md, Recovery)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from core.call_record import CallRecord
from core.contract import Contract, Limits
from core.events import EgressSummary
from core.jsonutil import JSON

RunStatus = Literal["running", "waiting_approval", "complete", "stopped"]


class _State(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=False)


class EvidenceRecord(_State):
    call_id: str
    check_id: str
    check_version: str
    command: list[str]
    exit_code: int | None
    timed_out: bool
    duration_ms: int
    image_digest: str
    revision: str
    policy_version: int
    output_ref: str | None
    passed: bool
    ts: float
    # Where the check connected through the egress proxy (empty: it had no network).
    egress: list[EgressSummary]


class PendingEffect(_State):
    call_id: str
    tool: str
    args: dict[str, JSON]
    kind: Literal["workspace", "external"]
    idempotency_key: str | None
    reason: str
    recorded_at: float
    resolved: bool = False
    applied: bool | None = None
    resolution: str | None = None


OperationStatus = Literal["started", "applied", "not_applied", "unknown"]


class Operation(_State):
    """One external effect, by what it is (run, tool, canonical args, revision): the
    same operation proposed again is a duplicate, never performed twice."""

    key: str
    tool: str
    args: dict[str, JSON]
    revision: str
    call_id: str  # the call that performed it (or is performing it)
    status: OperationStatus = "started"
    outcome: dict[str, JSON] = Field(default_factory=dict)


class Unmet(_State):
    """Something asked of the run that a call of ``tool`` did not do: the reviewer's
    requested changes (``changes_requested``) or a publish the secret scan refused
    (``secret_found``). A later call of the same tool that completes takes it up; what
    is left when the run ends is told in its outcome (core.outcome)."""

    call_id: str
    tool: str
    reason: Literal["changes_requested", "secret_found", "hidden_characters"]
    # Who asked, or what was found where: the words the outcome quotes.
    detail: str
    # The call would have had an effect outside the workspace (a publish).
    external: bool


def completed_as(unmet: Sequence[Unmet], applied: bool) -> str:
    """The outcome of a run that finished: ``complete`` only with nothing left undone."""
    if not unmet:
        return "complete"
    return "unpublished" if not applied and any(u.external for u in unmet) else "partial"


class Waiting(_State):
    call_id: str
    request_id: str
    approval_key: str
    revision: str = ""
    policy_version: int = 0


SCHEMA_VERSION = 7
"""1: the shape before versions (no ``schema_version`` key); 2: the same, versioned;
3: ``run_started`` in place of ``next_seq`` (the store numbers the events); 4: a call
record's fixed ``effect`` and the state's ``proposed_at``; 5: ``changes_requested``;
6: each evidence record's ``egress``; 7: ``unmet``."""


class RunState(_State):
    schema_version: int = SCHEMA_VERSION
    run_id: str
    contract: Contract
    limits: Limits
    policy_version: int
    actor: str
    status: RunStatus = "running"
    stop_reason: str | None = None
    stop_message: str = ""
    proposals: int = 0
    calls: int = 0
    started_at: float
    # The end of the run's working time: moved on by every wait for a human, which is
    # counted apart in ``waited_seconds`` (and ``waiting_since`` while a wait lasts).
    deadline: float
    waited_seconds: float = 0.0
    waiting_since: float | None = None
    base_revision: str
    revision: str
    evidence: list[EvidenceRecord] = Field(default_factory=list)
    # check_id -> index into ``evidence`` for the current revision; a write empties it.
    current_evidence: dict[str, int] = Field(default_factory=dict)
    pending_effects: list[PendingEffect] = Field(default_factory=list)
    # Calls not yet settled. A call leaves the state once its final ledger entry
    # is checkpointed, so a long run's checkpoints stay small.
    ledger: dict[str, CallRecord] = Field(default_factory=dict)
    changed_paths: list[str] = Field(default_factory=list)
    not_performed: list[dict[str, str]] = Field(default_factory=list)
    current_call: str | None = None
    current_proposal: JSON = None
    # When the current proposal arrived (the clock's time), checkpointed with it: an
    # effect fixed for it is dated so, and a crash before its request is checkpointed
    # fixes the same effect again and finds the same request.
    proposed_at: float | None = None
    waiting: Waiting | None = None
    feedback: dict[str, JSON] | None = None
    proposer_state: dict[str, JSON] = Field(default_factory=dict)
    # The ``run_started`` event is on the record: a run resumed after it is not started again.
    run_started: bool = False
    next_call: int = 1
    effects_applied: list[str] = Field(default_factory=list)
    # External effects by idempotency key (see Operation).
    operations: dict[str, Operation] = Field(default_factory=dict)
    # The call's key (core.waits.changes_key) -> the reviewer's "request changes" for
    # exactly that call (message, by, request_id): the identical call is shown the same
    # words, never asked again.
    changes_requested: dict[str, dict[str, str]] = Field(default_factory=dict)
    # What was asked of the run and not done (yet): see Unmet.
    unmet: list[Unmet] = Field(default_factory=list)

    @property
    def finished(self) -> bool:
        return self.status in ("complete", "stopped")

    @property
    def outcome(self) -> str:
        """``complete``, ``waiting_approval``, ``running`` or the stop reason; a run that
        finished with something asked of it undone is ``unpublished`` (nothing went
        outside the workspace, and a publish was among what was not done) or
        ``partial``, never ``complete``."""
        if self.status == "stopped":
            return self.stop_reason or "stopped"
        if self.status == "complete":
            return completed_as(self.unmet, bool(self.effects_applied))
        return self.status

    def deadline_at(self, now: float) -> float:
        """The working-time deadline as it will stand if a wait in progress ends now."""
        return self.deadline + (now - self.waiting_since if self.waiting_since is not None else 0.0)

    def waited_at(self, now: float) -> float:
        return self.waited_seconds + (now - self.waiting_since if self.waiting_since is not None else 0.0)

    def unresolved_effects(self) -> list[PendingEffect]:
        return [p for p in self.pending_effects if not p.resolved]

    def passing_current(self, check_id: str) -> EvidenceRecord | None:
        index = self.current_evidence.get(check_id)
        if index is None:
            return None
        record = self.evidence[index]
        if record.passed and record.revision == self.revision:
            return record
        return None

    def missing_checks(self) -> list[str]:
        return [c for c in self.contract.verification_targets if self.passing_current(c) is None]


class StateVersionError(ValueError):
    """A stored state this code cannot read: written by a newer release, or with a
    version that never existed."""


def _from_1(data: dict[str, Any]) -> dict[str, Any]:
    return {**data, "schema_version": 2}


def _from_2(data: dict[str, Any]) -> dict[str, Any]:
    """``next_seq`` counted the loop's events from 1, and the first was always
    ``run_started``: past 1, the run had started."""
    upgraded = {k: v for k, v in data.items() if k != "next_seq"}
    return {**upgraded, "schema_version": 3, "run_started": data.get("next_seq", 1) > 1}


def _from_3(data: dict[str, Any]) -> dict[str, Any]:
    """Calls recorded before effects were fixed have none: a wait for one goes stale
    (its key no longer matches) and the call is asked for again, its effect shown."""
    return {**data, "schema_version": 4}


def _from_4(data: dict[str, Any]) -> dict[str, Any]:
    """No reviewer had asked for changes before there was a way to."""
    return {**data, "schema_version": 5, "changes_requested": {}}


def _from_5(data: dict[str, Any]) -> dict[str, Any]:
    """No check had network before egress: every earlier check connected nowhere."""
    evidence = [{**record, "egress": []} for record in data.get("evidence", [])]
    return {**data, "schema_version": 6, "evidence": evidence}


def _from_6(data: dict[str, Any]) -> dict[str, Any]:
    """What earlier runs left undone was not kept apart: their outcome says what their
    stop did, as it did before."""
    return {**data, "schema_version": 7, "unmet": []}


# version N -> the step that turns a version-N state into version N+1.
UPGRADES: dict[int, Callable[[dict[str, Any]], dict[str, Any]]] = {1: _from_1, 2: _from_2, 3: _from_3, 4: _from_4, 5: _from_5, 6: _from_6}


def load_stored_state(data: Mapping[str, Any]) -> RunState:
    """The current ``RunState`` of a stored one, upgraded step by step from its
    version; the stored object itself is not changed (the next checkpoint writes
    the current shape)."""
    version = data.get("schema_version", 1)
    run = data.get("run_id", "?")
    if isinstance(version, bool) or not isinstance(version, int) or not version >= 1:
        raise StateVersionError(f"run {run}: the stored state's schema_version {version!r} is not a version (1 to {SCHEMA_VERSION})")
    if version > SCHEMA_VERSION:
        raise StateVersionError(
            f"run {run}: the stored state is schema version {version}, newer than this release reads ({SCHEMA_VERSION});"
            " it was written by a newer release: run that one, nothing was changed"
        )
    upgraded = dict(data)
    while version < SCHEMA_VERSION:
        upgraded = UPGRADES[version](upgraded)
        version += 1
    return RunState.model_validate(upgraded)
