"""A run's outcome told in words: what happened and what did not (docs/design.md,
Outcomes). Every surface that says how a run stands or ended (run and result pages,
lists, the inbox, the overview, the report, the API, mail, webhooks, traces) says it
with these words, from ``describe``: a run that did not do what its reviewer or its
contract asked never reads as a plain success, its limitations name why, and the
machine name stays beside the words (``code``, each limitation's ``reason``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field

from core.jsonutil import JSON
from core.state import RunState, Unmet, completed_as

# Machine name -> the reader's words: a run's outcome (core.state.RunState.outcome,
# plus ``queued``, which only the server's admission knows), every reason a run stops,
# and what a run left undone.
WORDS = {
    "running": "running",
    "queued": "queued",
    "waiting_approval": "waiting for approval",
    "complete": "complete",
    "unpublished": "completed without publishing",
    "partial": "completed, not all as asked",
    "stopped": "stopped",
    "killed": "killed",
    "denied": "denied",
    "tool_denied": "tool not allowed",
    "deadline": "out of time",
    "attempt_limit": "out of attempts",
    "budget_exhausted": "out of budget",
    "proposals_exhausted": "out of proposals",
    "receipt_invalid": "invalid receipt",
    "unresolved": "unresolved effect",
    "effect_conflict": "the remote branch holds another commit",
    "model_error": "model error",
    "approval_expired": "approval expired",
    "approval_cancelled": "approval cancelled",
    "sandbox_unavailable": "sandbox unavailable",
    "workspace_error": "workspace could not be prepared",
    "revision_mismatch": "workspace revision did not verify",
    "workspace_lost": "workspace could not be rebuilt",
    "unstorable": "a value could not be stored",
    "changes_not_taken_up": "requested changes not taken up",
    "secret_found": "secret found before publishing",
    "hidden_characters": "hidden characters found before publishing",
    "checks_missing": "no passing check on the final revision",
    "effects_unresolved": "effects of unknown outcome",
}
# Every reason a run stops for short of completing (a ``stopped`` event's ``status``):
# the loop's, the gates', the waits', and those the worker records when it cannot
# drive a run (runs.runtime.stop_undriven). tests/test_told_everywhere.py walks each.
STOP_REASONS = (
    "killed",
    "denied",
    "tool_denied",
    "deadline",
    "attempt_limit",
    "budget_exhausted",
    "proposals_exhausted",
    "receipt_invalid",
    "unresolved",
    "effect_conflict",
    "model_error",
    "approval_expired",
    "approval_cancelled",
    "sandbox_unavailable",
    "workspace_error",
    "revision_mismatch",
    "workspace_lost",
    "unstorable",
)
# Why a call was not performed (core.fold_calls.REFUSALS), in words.
REFUSED_WORDS = {
    "changes_requested": "the reviewer requested changes",
    "secret_found": "refused: a secret was found",
    "hidden_characters": "refused: the change adds hidden characters",
    "check_required": "refused: a check had not passed",
    "write_blocked": "blocked by an effect of unknown outcome",
    "tool_denied": "denied by the policy",
}
# What ``finish`` accepted means (the loop's words for it).
FINISHED = "finished with passing checks on the current revision"
# What a finished run may have left undone, by Unmet.reason: the limitation's machine name.
_UNMET_REASON = {"changes_requested": "changes_not_taken_up", "secret_found": "secret_found", "hidden_characters": "hidden_characters"}


def words(code: object) -> str:
    """The reader's words for an outcome or a reason; a name this table does not know
    yet is shown with spaces for underscores rather than not at all."""
    text = str(code or "")
    return WORDS.get(text, text.replace("_", " "))


@dataclass(frozen=True)
class Limitation:
    reason: str  # the machine name
    text: str  # the words


@dataclass(frozen=True)
class Outcome:
    code: str  # RunState.outcome's name (or ``queued``)
    label: str  # the words for ``code``: a chip, a list's column
    sentence: str  # what happened and what did not, the root cause first
    limitations: list[Limitation] = field(default_factory=list)

    @property
    def plain_success(self) -> bool:
        return self.code == "complete"

    def as_json(self) -> dict[str, JSON]:
        return asdict(self)


def _undone(unmet: Unmet) -> str:
    if unmet.reason == "secret_found":
        return f"a secret was found before publishing ({unmet.detail})"
    if unmet.reason == "hidden_characters":
        return f"the change adds characters that hide or reorder text ({unmet.detail})"
    return f"the reviewer's requested changes were not taken up ({unmet.detail})"


def _consequence(unmet: Unmet, applied: bool) -> str:
    if unmet.external and not applied:
        return "nothing was published"
    return f"{unmet.tool} {unmet.call_id} was not performed"


def describe(
    status: str,
    stop_reason: str | None,
    message: str,
    *,
    unmet: Sequence[Unmet],
    applied: bool,
    missing: Sequence[str] = (),
    unresolved: int = 0,
    queued: str = "",
) -> Outcome:
    """The outcome of a run whose status is ``status`` (core.state.RunStatus, or
    ``queued`` with ``queued`` saying where), stopped for ``stop_reason`` with
    ``message``, having left ``unmet`` undone and applied an external effect or not."""
    if status == "queued":
        return Outcome("queued", words("queued"), f"queued ({queued})" if queued else "queued")
    if status in ("running", "waiting_approval"):
        return Outcome(status, words(status), words(status))
    undone = [Limitation(_UNMET_REASON[u.reason], f"{_undone(u)}: {_consequence(u, applied)}") for u in unmet]
    root = "; ".join(_undone(u) for u in unmet)
    if status == "stopped":
        code = stop_reason or "stopped"
        said = f"{words(code)} ({message})" if message else words(code)
        sentence = f"stopped: {root}; then {said}" if root else f"stopped: {said}"
        limitations = [*undone, Limitation(code, f"the run did not complete: {said}")]
    else:
        code = completed_as(unmet, applied)
        sentence = f"{words(code)}: {root}" if root else f"completed: {FINISHED}"
        limitations = undone
    if missing:
        limitations.append(Limitation("checks_missing", f"no passing check on the final revision for: {', '.join(missing)}"))
    if unresolved:
        limitations.append(Limitation("effects_unresolved", f"{unresolved} effect(s) of unknown outcome were never reconciled"))
    return Outcome(code, words(code), sentence, limitations)


def outcome_of(state: RunState, *, queued: str = "") -> Outcome:
    """``describe`` for a run as its state stands; ``queued`` (where it waits) for a
    run the server has not admitted yet."""
    return describe(
        "queued" if queued else state.status,
        state.stop_reason,
        state.stop_message,
        unmet=state.unmet,
        applied=bool(state.effects_applied),
        missing=state.missing_checks() if state.finished else (),
        unresolved=len(state.unresolved_effects()) if state.finished else 0,
        queued=queued,
    )


def at_stop(status: str, message: str, unmet: Sequence[Unmet] = (), applied: bool = False) -> Outcome:
    """The outcome a ``stopped`` event of ``status`` (``complete`` or a stop reason)
    and ``message`` tells; without ``unmet``, as a stop recorded before outcomes were
    told is read."""
    finished = status == "complete"
    return describe("complete" if finished else "stopped", None if finished else status, message, unmet=unmet, applied=applied)


def said_at_stop(state: RunState, status: str, message: str) -> dict[str, str]:
    """What the ``stopped`` event about to be recorded tells (its ``outcome`` and
    ``said``), so every reader of that event tells the same words."""
    told = at_stop(status, message, state.unmet, bool(state.effects_applied))
    return {"outcome": told.code, "said": told.sentence}
