"""The decisions a run's events record, as the ledger's entries (docs/design.md, Decision
ledger). ``append_events``, the one writer of events, hands every batch it
stores here, in its transaction, so each decision event (a gate's on a call, a
reviewer's, a consumption, a lapse, a kill) has its entry exactly when it is stored.

An entry's ``shown`` is the digest of what the decider was shown: for a gate, the
rule's inputs (tool, the digest of the canonical arguments, revision, policy version,
the rule that matched, the decision); for a reviewer, the approval page's content
(runs.approval_flow.shown), which the reviewer's event names; for the rest, the event
as stored. What a decider was shown is rebuilt from the event (``shown_contents``),
so the ledger keeps no copy of it beside the log (for a reviewer, the flow keeps the
page's content). Everything is taken from the rows as stored (masked), so an export can be
checked against the run's log."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from core import events as ev
from ledger.models import Entry
from ledger.verify import content_digest
from ledger.writer import Actor, Decision, Shown, record, rule, system
from runs.models import Event, Run

# A stored event type -> the ledger's kind of decision, for the gates' events. The rows
# are read as stored (their payloads, masked), not parsed into their classes: every
# stored batch passes here, in the writer's transaction. The payload fields read below
# are tied to the classes' by tests/test_ledger_decisions.py (each decision event's
# example read here as its typed fields say).
GATE_KINDS = {
    ev.type_name(ev.InvalidInput): "gate.refused",
    ev.type_name(ev.Denied): "gate.denied",
    ev.type_name(ev.CallAdmitted): "gate.allowed",
    ev.type_name(ev.ApprovalRequired): "gate.asked",
    ev.type_name(ev.DuplicateEffect): "gate.refused",
    ev.type_name(ev.WriteBlocked): "gate.refused",
    ev.type_name(ev.CheckRequired): "gate.refused",
}
# Who decided, for a gate's refusal that names no policy rule.
GATE_RULES = {
    ev.type_name(ev.DuplicateEffect): "effects already known",
    ev.type_name(ev.WriteBlocked): "effects already known",
    ev.type_name(ev.CheckRequired): "evidence",
}
SECRETS_FOUND = ev.type_name(ev.SecretsFound)
CHANGES_REQUESTED = ev.type_name(ev.ChangesRequested)
APPROVAL_DECIDED = ev.type_name(ev.ApprovalDecided)
APPROVAL_CONSUMED = ev.type_name(ev.ApprovalConsumed)
APPROVAL_REFUSED = ev.type_name(ev.ApprovalRefused)
APPROVAL_LAPSED = ev.type_name(ev.ApprovalLapsed)
KILL_REQUESTED = ev.type_name(ev.KillRequested)

_projects: dict[str, int | None] = {}


def record_decisions(run_id: str, rows: Sequence[Event]) -> list[dict[str, Any] | None]:
    """The ledger's entries for the decision events among ``rows`` (just stored); each
    row's decision (``decision_of``) or None, in order, for the listeners that tell them
    too (a trace's span events: monitoring.spans), so none derives them again."""
    found = [_decision(row) for row in rows]
    decisions = [d for d in found if d is not None]
    if decisions:
        project_id = _project_of(run_id)
        record(*(Decision(**{**d, "project_id": project_id, "run_id": str(run_id)}) for d in decisions))
    return found


def remember_project(run_id: str, project_id: int | None) -> None:
    """What the driver of a run knows of it (runs.services.drive_run): its decisions'
    entries name the project without reading it in the checkpoint."""
    if len(_projects) > 4096:
        _projects.clear()
    _projects[str(run_id)] = project_id


def _project_of(run_id: str) -> int | None:
    """A run's project, which never changes: read once per process and run."""
    key = str(run_id)
    if key not in _projects:
        if len(_projects) > 4096:
            _projects.clear()
        _projects[key] = Run.objects.filter(pk=run_id).values_list("project_id", flat=True).first()
    return _projects[key]


def decision_of(row: Event) -> dict[str, Any] | None:
    """The decision a stored event records, as its ledger entry names it (kind, actor,
    decided, shown, policy version), or None; for the trace's span events too
    (monitoring.spans)."""
    return _decision(row)


def _decision(row: Event) -> dict[str, Any] | None:
    payload: Mapping[str, Any] = row.payload if isinstance(row.payload, dict) else {}
    kind = row.type
    call = {"call": row.call_id, "seq": row.seq}
    if kind in GATE_KINDS:
        return _gate(row, payload, call)
    if kind == SECRETS_FOUND and payload.get("decision") == "refuse":
        return _gate(row, payload, call, kind="gate.refused", by="secret scan")
    if kind == CHANGES_REQUESTED and payload.get("repeated"):
        # The identical call proposed again after a reviewer asked for changes: the
        # approval gate refuses it with the same words, asking nobody.
        return _gate(row, payload, call, kind="gate.refused", by="changes requested before")
    if kind == APPROVAL_DECIDED:
        decided = {
            **call,
            "request": payload.get("request_id"),
            "reason": payload.get("reason"),
            "grants": payload.get("grants"),
            "needed": payload.get("needed"),
            "self_approved": payload.get("self_approved"),
        }
        shown = str(payload.get("shown") or "")
        return {
            "kind": f"approval.{payload.get('decision')}",
            "actor": _reviewer(payload),
            "decided": decided,
            # The approval page's content, kept by the flow (runs.approval_flow.shown); the
            # event names its digest.
            "shown": Shown.kept_elsewhere(shown) if shown else _held(payload),
        }
    if kind == APPROVAL_CONSUMED:
        return {
            "kind": "approval.consumed",
            "actor": system("the run"),
            "decided": {**call, "request": payload.get("request_id"), "key": payload.get("key")},
            "shown": _held(payload),
        }
    if kind == APPROVAL_REFUSED:
        return {
            "kind": "approval.refused",
            "actor": system("the run"),
            "decided": {**call, "request": payload.get("request_id"), "reason": payload.get("reason")},
            "shown": _held(payload),
        }
    if kind == APPROVAL_LAPSED:
        return {
            "kind": f"approval.{payload.get('status')}",
            "actor": system("harness"),
            "decided": {**call, "request": payload.get("request_id"), "reason": payload.get("reason")},
            "shown": _held(payload),
        }
    if kind == KILL_REQUESTED:
        return {
            "kind": "operator.kill",
            # The operator, or the API token they killed through.
            "actor": _reviewer(payload),
            "decided": {"scope": payload.get("scope"), "reason": payload.get("reason", ""), "seq": row.seq},
            "shown": _held(payload),
        }
    return None


def _held(value: Any) -> Shown:
    """What a decider was shown, rebuilt from the event that records the decision: the
    run's log holds it, so the ledger keeps no copy (an export rebuilds it: ``shown_contents``)."""
    return Shown.of(value, keep=False)


def shown_contents(entries: Sequence[Entry]) -> dict[int, str]:
    """For an export (ledger.export): the content each entry's ``shown`` covers, rebuilt
    from the event that recorded its decision, by the entry's seq; an entry whose event
    retention removed, or whose rebuilt content does not give its ``shown``, has none."""
    wanted: dict[tuple[str, int], Entry] = {}
    for entry in entries:
        seq = _decided_seq(entry.decided) if entry.run_id else None
        if seq is not None:
            wanted[(entry.run_id, seq)] = entry
    if not wanted:
        return {}
    found: dict[int, str] = {}
    runs = {run for run, _ in wanted}
    seqs = {seq for _, seq in wanted}
    for row in Event.objects.filter(run_id__in=runs, seq__in=seqs):
        found_entry = wanted.get((str(row.run_id), row.seq))
        decision = _decision(row) if found_entry is not None else None
        if found_entry is None or decision is None:
            continue
        entry = found_entry
        shown: Shown = decision["shown"]
        if shown.canonical and shown.digest == entry.shown:
            found[entry.seq] = shown.canonical.decode("utf-8")
    return found


def _decided_seq(decided: str) -> int | None:
    try:
        value = json.loads(decided)
    except ValueError:
        return None
    seq = value.get("seq") if isinstance(value, dict) else None
    return seq if isinstance(seq, int) else None


def _reviewer(payload: Mapping[str, Any]) -> Actor:
    by = str(payload.get("by", ""))
    via = payload.get("via")
    # As ledger.writer.person names a person deciding through a token.
    return Actor("token", f"{by} ({via})") if via else Actor("user", by)


def _gate(
    row: Event, payload: Mapping[str, Any], call: dict[str, Any], *, kind: str | None = None, by: str | None = None
) -> dict[str, Any]:
    """A gate's decision: the rule's inputs are what it was shown."""
    found = payload.get("call")
    record_of: Mapping[str, Any] = found if isinstance(found, dict) else {}
    tool = payload.get("tool") or payload.get("for_tool") or record_of.get("tool")
    args = payload.get("args", record_of.get("args"))
    version = payload.get("policy_version", record_of.get("policy_version"))
    matched = by or payload.get("rule") or GATE_RULES.get(row.type) or (f"gate {payload['gate']}" if "gate" in payload else row.type)
    inputs = {
        "tool": tool,
        "args": content_digest(args) if args is not None else None,
        "revision": payload.get("revision", record_of.get("revision_before")),
        "policy_version": version,
        "rule": matched,
        "decision": row.type,
        "effect": content_digest(payload["effect"]) if payload.get("effect") is not None else None,
    }
    decided = {**call, "tool": tool, "decision": row.type}
    for name in ("request_id", "key", "reason", "problems", "missing", "idempotency_key"):
        if name in payload:
            decided[name] = payload[name]
    return {
        "kind": kind or GATE_KINDS[row.type],
        "actor": rule(str(matched)),
        "decided": decided,
        "shown": _held(inputs),
        "policy_version": version if isinstance(version, int) else None,
    }
