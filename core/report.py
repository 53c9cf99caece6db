"""The final report (docs/design.md, Events): what happened, as data, never claiming
completion for a run that stopped or left undone what it was asked (core.outcome)."""

from __future__ import annotations

from core.jsonutil import JSON
from core.outcome import outcome_of
from core.state import RunState

NOT_PERFORMED_STATES = ("proposed", "validated", "allowed", "failed")


def build_report(state: RunState) -> dict[str, JSON]:
    open_calls = [
        {"call_id": r.call_id, "tool": r.tool, "state": r.state} for r in state.ledger.values() if r.state in NOT_PERFORMED_STATES
    ]
    evidence = [e.model_dump() for e in state.evidence]
    current = {check: state.evidence[i].model_dump() for check, i in state.current_evidence.items()}
    pending = [p.model_dump() for p in state.unresolved_effects()]
    told = outcome_of(state)
    return {
        "run_id": state.run_id,
        "task_id": state.contract.task_id,
        "status": state.outcome,
        # Done as asked: a run that finished with something asked of it undone is not.
        "completed": told.plain_success,
        "message": state.stop_message,
        # The outcome in words, and each limitation's machine name beside its words.
        "outcome": told.as_json(),
        "proposals": state.proposals,
        "calls": state.calls,
        "limits": state.limits.model_dump(),
        # Time spent waiting for reviewers, apart from the working time the limits bound
        # (plus the wait in progress since ``waiting_since``, for a run still waiting).
        "waited_seconds": round(state.waited_seconds, 3),
        "waiting_since": state.waiting_since,
        "policy_version": state.policy_version,
        "base_revision": state.base_revision,
        "revision": state.revision,
        "changed_files": list(state.changed_paths),
        "effects_applied": list(state.effects_applied),
        "evidence": evidence,
        "current_evidence": current,
        "not_performed": state.not_performed + open_calls,
        "pending": pending,
        "limitations": [limitation.text for limitation in told.limitations],
    }
