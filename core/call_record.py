"""A call's record: what the run's ledger keeps of each call (``RunState.ledger``)
and what an event that settles a call carries (``call`` in core.events). One model for
both, so the fold takes an event's record into the ledger as it is."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from core.jsonutil import JSON

TERMINAL_STATES = ("completed", "failed")
LedgerState = Literal["proposed", "validated", "allowed", "started", "completed", "failed", "unknown"]


class CallRecord(BaseModel):
    """Changed in place by the fold (core.fold_calls) as the call goes on; an event
    holds a copy of its own (core.events.SettledCall)."""

    model_config = ConfigDict(extra="forbid", validate_assignment=False)

    call_id: str
    tool: str
    args: dict[str, JSON] = Field(default_factory=dict)
    state: LedgerState = "proposed"
    attempts: int = 0
    idempotency_key: str | None = None
    decision: str | None = None
    rule: str | None = None
    approval_key: str | None = None
    last_status: str | None = None
    revision_before: str | None = None
    # Why each transient attempt failed, so the result that follows can tell the
    # model what happened before it.
    transient_reasons: list[str] = Field(default_factory=list)
    # The policy version whose gates decided this call (policy changes reach runs in flight).
    policy_version: int | None = None
    # The approval key of the grant this call consumed; an ``ask`` call executes only
    # with a consumed grant for exactly its tool, arguments, revision and policy version.
    granted_key: str | None = None
    # An external call's effect, fixed when it was first admitted or asked for
    # (core.effects): the request shows it, its key binds it, the executor does it.
    effect: dict[str, JSON] | None = None
