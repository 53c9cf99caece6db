"""What the loop tells the proposer about its last proposal: one class per kind.

The loop produces these; a proposer matches on them exhaustively (``match`` with
``assert_never``), so a new kind is a type error wherever one is rendered, never a
silently ignored dict. They are stored in ``RunState.feedback`` (and a result as an
``Operation``'s outcome) as the plain objects they dump to: ``{"kind": ..., ...}``
with the fields in the order declared here, ``earlier_attempts`` only when there were
any."""

from __future__ import annotations

from typing import Annotated, Any, Literal, TypeAlias

from pydantic import BaseModel, ConfigDict, Field, SerializerFunctionWrapHandler, TypeAdapter, model_serializer

from core.errors import FieldProblem
from core.jsonutil import JSON
from core.state import PendingEffect


class _Feedback(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    def to_json(self) -> dict[str, JSON]:
        dumped: dict[str, JSON] = self.model_dump(mode="json")
        return dumped


class Result(_Feedback):
    """The call ran; ``data`` is what the tool returned (or a bounded summary of it)."""

    kind: Literal["result"] = "result"
    call_id: str
    tool: str
    revision: str
    data: dict[str, JSON]
    artifacts: list[str]
    # Why the attempts before the one that ran failed transiently.
    earlier_attempts: list[str] | None = None

    @model_serializer(mode="wrap")
    def _omit_no_earlier(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        dumped: dict[str, Any] = handler(self)
        if self.earlier_attempts is None:
            dumped.pop("earlier_attempts", None)
        return dumped


class InvalidInput(_Feedback):
    """Refused at the parse, resolve or validate gate: nothing ran."""

    kind: Literal["invalid_input"] = "invalid_input"
    call_id: str
    problems: list[FieldProblem]


class CheckRequired(_Feedback):
    """Refused: the current revision lacks passing checks the call needs."""

    kind: Literal["check_required"] = "check_required"
    call_id: str
    revision: str
    missing: list[str]


class WriteBlocked(_Feedback):
    """Refused: earlier effects of unknown outcome block every effect until reconciled."""

    kind: Literal["write_blocked"] = "write_blocked"
    call_id: str
    pending: list[PendingEffect]


class OutcomeUnknown(_Feedback):
    """The call ran but whether its effect happened is not known."""

    kind: Literal["outcome_unknown"] = "outcome_unknown"
    call_id: str
    tool: str
    idempotency_key: str | None
    data: dict[str, JSON]


class Duplicate(_Feedback):
    """The same external effect was proposed before: nothing ran, here is the first outcome."""

    kind: Literal["duplicate"] = "duplicate"
    call_id: str
    tool: str
    of_call: str
    idempotency_key: str
    status: str
    first_outcome: dict[str, JSON]


class ChangesRequested(_Feedback):
    """A reviewer asked for changes instead of this call: nothing ran. ``message`` is
    the reviewer's own words (a person's, not policy); the identical call will not be
    asked for again."""

    kind: Literal["changes_requested"] = "changes_requested"
    call_id: str
    tool: str
    message: str
    by: str


class Interrupted(_Feedback):
    """The worker stopped during the call; its outcome is being reconciled."""

    kind: Literal["interrupted"] = "interrupted"
    call_id: str
    tool: str


class Complete(_Feedback):
    """The run finished (no proposal follows)."""

    kind: Literal["complete"] = "complete"
    call_id: str


Feedback: TypeAlias = Annotated[
    Result | InvalidInput | CheckRequired | WriteBlocked | OutcomeUnknown | Duplicate | ChangesRequested | Interrupted | Complete,
    Field(discriminator="kind"),
]

_ADAPTER: TypeAdapter[Feedback] = TypeAdapter(Feedback)


def stored(feedback: Feedback) -> dict[str, JSON]:
    """The object the state holds for ``feedback`` (``RunState.feedback``), which
    ``feedback_from_json`` turns back into ``feedback`` itself without validating it
    again (some 18,000 instructions a proposal)."""
    global _stored
    raw = feedback.to_json()
    _stored = (raw, feedback)
    return raw


def feedback_from_json(raw: object) -> Feedback:
    """A stored feedback object as its class (pydantic's ValidationError if it is none).
    The object ``stored`` made last is answered with the feedback it was made from: it
    is that very object (held here, so no other can take its identity), which the
    state replaces and never changes in place, and validating it gives an equal
    feedback (tests/test_feedback.py). One for the process, set at once: any other
    object (another run's, another thread's, one loaded, the loop's own when a fold
    that checks the state made one since) is validated."""
    made = _stored
    if made is not None and raw is made[0]:
        return made[1]
    return _ADAPTER.validate_python(raw)


_stored: tuple[object, Feedback] | None = None
