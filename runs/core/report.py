"""The final report (DESIGN section 8): what happened, as data, never claiming
completion for a run that stopped."""

from __future__ import annotations

from runs.core.jsonutil import JSON
from runs.core.paths import patch_targets
from runs.core.state import RunState

NOT_PERFORMED_STATES = ("proposed", "validated", "allowed", "failed")


def build_report(state: RunState) -> dict[str, JSON]:
    ledger = list(state.ledger.values())
    changed = sorted(
        {str(r.args.get("path")) for r in ledger if r.tool == "write_file" and r.state in ("completed", "unknown")}
        | {t for r in ledger if r.tool == "apply_patch" and r.state in ("completed", "unknown") for t in _targets(r.args)}
    )
    evidence = [e.model_dump() for e in state.evidence]
    current = {check: state.evidence[i].model_dump() for check, i in state.current_evidence.items()}
    limitations = []
    if state.status != "complete":
        limitations.append(f"the run did not complete: {state.outcome} ({state.stop_message or 'no message'})")
    if state.missing_checks():
        limitations.append(f"no passing check on the final revision for: {', '.join(state.missing_checks())}")
    pending = [p.model_dump() for p in state.unresolved_effects()]
    if pending:
        limitations.append(f"{len(pending)} effect(s) of unknown outcome were never reconciled")
    return {
        "run_id": state.run_id,
        "task_id": state.contract.task_id,
        "status": state.outcome,
        "completed": state.status == "complete",
        "message": state.stop_message,
        "proposals": state.proposals,
        "calls": state.calls,
        "limits": state.limits.model_dump(),
        "policy_version": state.policy_version,
        "base_revision": state.base_revision,
        "revision": state.revision,
        "changed_files": changed,
        "effects_applied": list(state.effects_applied),
        "evidence": evidence,
        "current_evidence": current,
        "not_performed": [{"call_id": r.call_id, "tool": r.tool, "state": r.state} for r in ledger if r.state in NOT_PERFORMED_STATES],
        "pending": pending,
        "limitations": limitations,
    }


def _targets(args: dict[str, JSON]) -> list[str]:
    return patch_targets(str(args.get("patch", "")))
