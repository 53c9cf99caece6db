"""The gate set a run is driven through (docs/design.md, Gates): the function that
decides each of gates 1-7 (parse, resolve, validate, authorize, effects already known,
evidence, approval) and gate 9 (receipt check), and the limits the loop keeps between
them. ``core.loop.GATES`` is the real set; a test
switches a control off by handing the loop a set with that one function replaced
(``tests/test_selftest.py``), which shows each control is load-bearing."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from core.call_record import CallRecord
from core.context import RunContext
from core.decisions import (
    Accepted,
    Ask,
    Authorized,
    Blocked,
    ChangesRequested,
    Deny,
    Duplicate,
    Execute,
    NeedsEvidence,
    Parsed,
    Proceed,
    Refuse,
)
from core.policy import Authorization
from core.receipts import Receipt
from core.state import RunState
from core.tools import ToolSpec


@dataclass(frozen=True)
class Gates:
    # Gates 1-3 (parse, resolve, validate) read nothing outside the run: they decide before
    # anything holding the proposal is stored.
    parse: Callable[[str, object], Refuse | Parsed]
    resolve: Callable[[RunContext, Parsed], Refuse | Deny | Accepted]
    validate: Callable[[RunContext, Accepted], Refuse | Accepted]
    authorize: Callable[[RunContext, CallRecord, ToolSpec], Deny | Authorized]
    known_effects: Callable[[RunContext, CallRecord, ToolSpec], Proceed | Duplicate | Blocked]
    # Authorization None: finish, which no rule authorizes and which always needs evidence.
    evidence: Callable[[RunContext, CallRecord, ToolSpec, Authorization | None], Proceed | NeedsEvidence]
    approval: Callable[[RunContext, CallRecord, ToolSpec, Authorization], Ask | ChangesRequested | Execute]
    # Gate 9, receipt check: the receipt as the harness accepts it, or ReceiptInvalid.
    receipt: Callable[[object, CallRecord, ToolSpec, str], Receipt]
    # The limits between the gates.
    proposals_left: Callable[[RunState], bool]
    attempts_left: Callable[[RunState, CallRecord], bool]
    # What failed when a transient receipt says the sandbox's own infrastructure did.
    infrastructure_failure: Callable[[Receipt], str | None]
