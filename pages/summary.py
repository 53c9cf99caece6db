"""A run at a glance: status, budgets, revision and evidence, pending effects and
approvals. The run page renders it and its script re-reads it as events arrive."""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from typing import Any

from django.urls import reverse

from approvals.policies import current_policy_row, load_policy
from core import events as ev
from core.state import RunState
from core.visible import visible_text
from live.trace import EMPTY_OUTPUT_REF, TONES, outcome_tone, short
from live.wording import human
from runs.agent_runs import agent_of, run_usage
from runs.control import ACTIVE
from runs.models import Event, Run
from runs.outcome import status_of, told
from runs.persistence.published import published
from runs.persistence.store import load_state


def _budget(name: str, used: float, limit: float, unit: str = "", digits: int = 0, clock: str = "") -> dict[str, Any]:
    """``clock``: the run clock (working or waited) a time budget counts, and shows
    rounded as the clock is (whole seconds, down), so the two always agree."""
    shown = round(used, digits) if digits else math.floor(used)
    return {
        "name": name,
        "used": shown,
        "limit": limit,
        "unit": unit,
        "ratio": min(1.0, used / limit) if limit else 1.0,
        **({"clock": clock} if clock else {}),
    }


def model_budgets(run: Run, snapshot: dict[str, Any]) -> list[dict[str, Any]]:
    """Tokens and cost against the run's model budget: Harness's own model loop's, or
    an outside agent's calls through the model proxy (none for a scripted run)."""
    usage = run_usage(run, snapshot)
    if usage is None:
        return []
    return [
        # Tokens are counted whole: the limit is shown as one (2000000, not 2000000.0).
        _budget("tokens", float(usage["tokens"]), int(float(usage["max_tokens"] or 0))),
        _budget("cost", float(usage["cost_usd"]), float(usage["max_cost_usd"] or 0), " USD", digits=4),
    ]


def sandbox_waiting(run: Run) -> str:
    """Why the run waits for the sandbox engine right now, or "" when it does not."""
    kinds = (ev.type_name(ev.SandboxWaiting), ev.type_name(ev.SandboxWaitOver))
    last = Event.objects.filter(run=run, type__in=kinds).order_by("-seq").first()
    typed = last.typed() if last is not None else None
    return typed.reason if isinstance(typed, ev.SandboxWaiting) else ""


def run_clocks(run: Run, state: RunState) -> tuple[float, float]:
    """(working, waited) seconds: the run's own working time (what wall_time limits)
    and the time it waited for reviewers, counted apart (bounded by expiry and the
    policy's limit). A finished run's clocks stopped at its last checkpoint."""
    if status_of(run) == "queued":
        # Time in the queue is not the run's: its clocks start when it is admitted.
        return 0.0, 0.0
    finished = run.status not in ACTIVE
    until = run.updated_at.timestamp() if finished else time.time()
    waited = state.waited_seconds if finished else state.waited_at(until)
    return max(0.0, until - state.started_at - waited), waited


def shown_clocks(run: Run, state: RunState) -> tuple[float, float]:
    """The clocks as pages get them: to a tenth of a second, the one number the
    clock and its budget are both shown from."""
    working, waited = run_clocks(run, state)
    return round(working, 1), round(waited, 1)


def egress_text(egress: Sequence[ev.EgressSummary]) -> str:
    """Where a check connected, for a reviewer: each destination it asked the proxy
    for, reached or refused (and why); "" for a check without network."""
    parts = []
    for d in egress:
        if d.allowed:
            count = f"{d.connections} connection{'s' if d.connections != 1 else ''}"
            parts.append(f"{d.host}:{d.port} reached ({count}, {d.bytes_out} bytes out, {d.bytes_in} bytes in)")
        else:
            parts.append(f"{d.host}:{d.port} refused ({d.reason})")
    return "; ".join(parts)


def _latest_evidence(run: Run, state: RunState) -> list[dict[str, Any]]:
    """Each check's latest result, in the order the checks first ran."""
    latest: dict[str, Any] = {}
    for index, record in enumerate(state.evidence):
        latest[record.check_id] = {
            "check_id": record.check_id,
            "passed": record.passed,
            "exit_code": record.exit_code,
            "revision": short(record.revision),
            "current": state.current_evidence.get(record.check_id) == index and record.revision == state.revision,
            "network": egress_text(record.egress),
            "output_href": reverse("runs:artifact", args=[run.pk, record.output_ref])
            if record.output_ref and record.output_ref != EMPTY_OUTPUT_REF
            else "",
        }
    return list(latest.values())


def _budgets(run: Run, state: RunState, working: float, waited: float) -> list[dict[str, Any]]:
    """What the run has used of each limit: the contract's, the policy's wait and the model's."""
    max_wait = load_policy(current_policy_row(run.project_id)).max_wait_seconds
    wait_budget = [_budget("waiting", waited, max_wait, "s", clock="waited")] if max_wait else []
    return [
        _budget("proposals", state.proposals, state.limits.max_proposals),
        _budget("calls", state.calls, state.limits.max_tool_calls),
        _budget("time", working, state.limits.wall_time_seconds, "s", clock="working"),
        *wait_budget,
        *model_budgets(run, state.proposer_state),
    ]


def _approvals(run: Run) -> list[dict[str, Any]]:
    return [
        {
            "id": str(request.pk),
            "tool": request.tool,
            "status": request.status,
            "tone": TONES.get(request.status, "muted"),
            "status_label": human(request.status),
            "expires_at": request.expires_at.isoformat(),
            "href": reverse("approvals:detail", args=[request.pk]),
        }
        for request in run.approval_requests.order_by("created_at")
    ]


def base_note(base: str, revision: str, finished: bool) -> str:
    """Words beside (or instead of) the base revision: a run that has not written
    since its workspace was prepared is unchanged; a run whose workspace is not
    prepared yet, or never was, has no base."""
    if base:
        return "unchanged" if base == revision else ""
    return "no workspace: the run ended before one was prepared" if finished else "no workspace yet"


def run_summary(run: Run) -> dict[str, Any]:
    state = load_state(run)
    finished = run.status not in ACTIVE
    working, waited = shown_clocks(run, state)
    outcome = told(run)
    agent = agent_of(run)
    return {
        "id": str(run.pk),
        # The outside agent that proposed the run's calls (null: Harness's own loop).
        "agent": agent.as_json() if agent is not None else None,
        # ``queued`` for a run not admitted yet: its clocks do not tick.
        "status": status_of(run),
        "tone": outcome_tone(outcome.code),
        "outcome": outcome.code,
        "outcome_label": outcome.label,
        # What happened and what did not, where there is more to say than the chip.
        "said": visible_text(outcome.sentence) if outcome.sentence != outcome.label else "",  # set as text by the live page
        "limitations": [limitation.text for limitation in outcome.limitations],
        "active": not finished,
        "kill_requested": run.kill_requested,
        "sandbox_waiting": sandbox_waiting(run) if not finished else "",
        "revision": short(state.revision),
        "base_revision": short(state.base_revision),
        "base_note": base_note(state.base_revision, state.revision, finished),
        "evidence_current": not state.missing_checks(),
        "missing_checks": state.missing_checks(),
        "budgets": _budgets(run, state, working, waited),
        "evidence": _latest_evidence(run, state),
        "working_seconds": working,
        "waited_seconds": waited,
        "waiting_since": state.waiting_since,
        "pending_effects": [{"call_id": p.call_id, "tool": p.tool, "kind": p.kind, "reason": p.reason} for p in state.unresolved_effects()],
        "approvals": _approvals(run),
        "published": published(run),
        "report_href": reverse("runs:report", args=[run.pk]) if finished else "",
        "result_href": reverse("runs:result", args=[run.pk]) if finished else "",
        "last_seq": run.last_seq,
    }
