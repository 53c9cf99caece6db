"""What the gates decide (docs/design.md, Gates). A gate returns one of these and acts
on nothing; ``core.loop`` is the one place that acts on them. Each decision carries
the call it is about.

``Decision`` is the closed set the loop acts on: ``core.loop.act`` matches every
member, and mypy proves it does (``assert_never``). ``Proceed``, ``Accepted`` and
``Authorized`` only pass a call on to the next gate."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeAlias

from core.call_record import CallRecord
from core.errors import FieldProblem
from core.jsonutil import JSON
from core.policy import Authorization
from core.state import Operation, PendingEffect
from core.tools import ToolSpec

# -- passing a call on ----------------------------------------------------------------


@dataclass(frozen=True)
class Proceed:
    """The gate lets the call through to the next one."""


@dataclass(frozen=True)
class Parsed:
    """Through gate 1 (parse): a proposal of the shape {tool, args}."""

    call_id: str
    tool: str
    args: dict[str, JSON]


@dataclass(frozen=True)
class Accepted:
    """Through gate 2 (resolve), then gate 3 (validate): the tool, and its arguments,
    as validated once through both; ``looked_up`` is the internal key a lookup is to
    find."""

    call_id: str
    spec: ToolSpec
    args: dict[str, JSON]
    looked_up: str | None = None


@dataclass(frozen=True)
class Authorized:
    """Through gate 4 (authorize): the policy allows the call or asks for it."""

    authorization: Authorization


# -- the decisions the loop acts on -------------------------------------------------------


@dataclass(frozen=True)
class Refuse:
    """``invalid_input`` at ``gate``, fed back to the proposer; the step ends."""

    call_id: str
    gate: str
    problems: list[FieldProblem]


@dataclass(frozen=True)
class Deny:
    """``denied``: the run stops ``tool_denied``. ``record`` is the call's record, once it
    has one (a tool outside the contract is denied before)."""

    call_id: str
    tool: str
    rule: str
    reason: str
    message: str
    policy_version: int | None = None
    record: CallRecord | None = None


@dataclass(frozen=True)
class Duplicate:
    """The same external effect again: nothing is performed, nobody is asked, and the
    proposer gets the first outcome."""

    record: CallRecord
    done: Operation


@dataclass(frozen=True)
class Blocked:
    """``write_blocked``: an effectful call while effects of unknown outcome are unresolved."""

    record: CallRecord
    pending: list[PendingEffect]


@dataclass(frozen=True)
class NeedsEvidence:
    """``check_required``: checks missing on the current revision, fed back."""

    record: CallRecord
    missing: list[str]


@dataclass(frozen=True)
class Ask:
    """The call runs only with a consumed grant: fix its effect, file a request, wait."""

    record: CallRecord
    spec: ToolSpec
    authorization: Authorization


@dataclass(frozen=True)
class ChangesRequested:
    """A reviewer asked for changes instead of exactly this call (``key``): it is not
    performed and the model is shown the reviewer's words; ``repeated``: the identical
    call again, shown the same words without asking anyone."""

    record: CallRecord
    key: str
    request_id: str
    message: str
    by: str
    repeated: bool = False


@dataclass(frozen=True)
class Execute:
    """Admitted: ``call_admitted``, then the attempts (gates 8-10: execute, receipt check, observe)."""

    record: CallRecord
    spec: ToolSpec
    authorization: Authorization


@dataclass(frozen=True)
class Complete:
    """``finish`` with passing checks on the current revision and nothing pending."""

    record: CallRecord


@dataclass(frozen=True)
class Stop:
    """The run stops with ``reason``; ``fails`` is the call that fails with it."""

    reason: str
    message: str
    fails: CallRecord | None = None


@dataclass(frozen=True)
class Regate:
    """The call goes back through gates 4-7 (authorize, effects already known, evidence,
    approval) at the current revision, under the policy in force: a wait for it ended
    (with the grant it consumed, or without one), or it is retried after a crash."""

    record: CallRecord
    spec: ToolSpec


@dataclass(frozen=True)
class KeepWaiting:
    """The run waits for reviewers (a request filed, or one still open)."""


Decision: TypeAlias = (
    Refuse | Deny | Duplicate | Blocked | NeedsEvidence | Ask | ChangesRequested | Execute | Complete | Stop | Regate | KeepWaiting
)
