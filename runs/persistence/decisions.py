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
page's content). Everything is taken from the events as stored (masked: the typed event
of a row masking changed is the row's, read back), so an export can be checked against
the run's log."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from typing import Any

from core import events as ev
from core.call_record import CallRecord
from ledger.models import Entry
from ledger.verify import content_digest, sha256
from ledger.writer import Actor, Decision, Shown, record, rule, system
from runs.models import Event, Run

# A gate's event -> the ledger's kind of decision.
GATE_KINDS: dict[type[ev.Event], str] = {
    ev.InvalidInput: "gate.refused",
    ev.Denied: "gate.denied",
    ev.CallAdmitted: "gate.allowed",
    ev.ApprovalRequired: "gate.asked",
    ev.DuplicateEffect: "gate.refused",
    ev.WriteBlocked: "gate.refused",
    ev.CheckRequired: "gate.refused",
}
# Who decided, for a gate's refusal that names no policy rule.
GATE_RULES: dict[type[ev.Event], str] = {
    ev.DuplicateEffect: "effects already known",
    ev.WriteBlocked: "effects already known",
    ev.CheckRequired: "evidence",
}

_projects: dict[str, int | None] = {}


def record_decisions(run_id: str, seqs: Sequence[int], events: Sequence[ev.Event], connection: Any = None) -> list[dict[str, Any] | None]:
    """The ledger's entries for the decision events among the rows just stored as
    ``seqs`` (each row's typed event as stored, masked values included, is ``events``'
    at its index), through ``connection`` (the writer's, where it holds it:
    ledger.writer.record); each row's decision (``decision_of``) or None, in order, for
    the listeners that tell them too (a trace's span events: monitoring.spans), so none
    derives them again."""
    found = [_decision(seq, event) for seq, event in zip(seqs, events, strict=True)]
    if any(found):
        project_id, run = _project_of(run_id), str(run_id)
        # Positional: keywords from a merged dict cost the entry more than the rest of its decision.
        record(
            *(
                Decision(
                    d["kind"], d["actor"], d["decided"], d["shown"], project_id, run, d.get("policy_version"), None, d.get("decided_text")
                )
                for d in found
                if d is not None
            ),
            connection=connection,
        )
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
    return _decision(row.seq, row.typed())


# The events that record a decision (some only with the values ``_decision`` checks):
# every other event of a batch is passed over with one look-up.
_DECIDING = frozenset(
    (
        *GATE_KINDS,
        ev.SecretsFound,
        ev.ChangesRequested,
        ev.ApprovalDecided,
        ev.ApprovalConsumed,
        ev.ApprovalRefused,
        ev.ApprovalLapsed,
        ev.KillRequested,
    )
)


def _decision(seq: int, event: ev.Event) -> dict[str, Any] | None:
    if type(event) not in _DECIDING:
        return None
    call = {"call": event.call_id, "seq": seq}
    match event:
        # An admission first, the decision of nearly every step: each class tried
        # before the one that matches is a failed isinstance on a pydantic model (ABC's
        # slow path), some 1,700 instructions.
        case (
            ev.CallAdmitted()
            | ev.ApprovalRequired()
            | ev.InvalidInput()
            | ev.Denied()
            | ev.DuplicateEffect()
            | ev.WriteBlocked()
            | ev.CheckRequired()
        ):
            return _gate(event, call)
        case ev.SecretsFound(decision="refuse"):
            return _gate(event, call, kind="gate.refused", by="secret scan")
        case ev.ChangesRequested(repeated=True):
            # The identical call proposed again after a reviewer asked for changes: the
            # approval gate refuses it with the same words, asking nobody.
            return _gate(event, call, kind="gate.refused", by="changes requested before")
        case ev.ApprovalDecided():
            decided = {
                **call,
                "request": event.request_id,
                "reason": event.reason,
                "grants": event.grants,
                "needed": event.needed,
                "self_approved": event.self_approved,
            }
            return {
                "kind": f"approval.{event.decision}",
                "actor": _reviewer(event.by, event.via),
                "decided": decided,
                # The approval page's content, kept by the flow (runs.approval_flow.shown); the
                # event names its digest.
                "shown": Shown.kept_elsewhere(event.shown) if event.shown else _held(event.payload()),
            }
        case ev.ApprovalConsumed():
            return {
                "kind": "approval.consumed",
                "actor": system("the run"),
                "decided": {**call, "request": event.request_id, "key": event.key},
                "shown": _held(event.payload()),
            }
        case ev.ApprovalRefused():
            return {
                "kind": "approval.refused",
                "actor": system("the run"),
                "decided": {**call, "request": event.request_id, "reason": event.reason},
                "shown": _held(event.payload()),
            }
        case ev.ApprovalLapsed():
            return {
                "kind": f"approval.{event.status}",
                "actor": system("harness"),
                "decided": {**call, "request": event.request_id, "reason": event.reason},
                "shown": _held(event.payload()),
            }
        case ev.KillRequested():
            return {
                "kind": "operator.kill",
                # The operator, or the API token they killed through.
                "actor": _reviewer(event.by, event.via),
                "decided": {"scope": event.scope, "reason": event.reason, "seq": seq},
                "shown": _held(event.payload()),
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
        decision = decision_of(row) if found_entry is not None else None
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


def _reviewer(by: str, via: str) -> Actor:
    # As ledger.writer.person names a person deciding through a token.
    return Actor("token", f"{by} ({via})") if via else Actor("user", by)


_GateEvent = (
    ev.InvalidInput
    | ev.Denied
    | ev.CallAdmitted
    | ev.ApprovalRequired
    | ev.DuplicateEffect
    | ev.WriteBlocked
    | ev.CheckRequired
    | ev.SecretsFound
    | ev.ChangesRequested
)


def _gate(event: _GateEvent, call: dict[str, Any], *, kind: str | None = None, by: str | None = None) -> dict[str, Any]:
    """A gate's decision: the rule's inputs are what it was shown. A refusal that settles
    a call takes the arguments, revision and policy version it does not name itself from
    the call's record it carries."""
    decided: dict[str, Any] = {**call}
    effect: Mapping[str, Any] | None = None
    tool: str | None
    args: Mapping[str, Any] | None
    revision: str | None
    version: int | None
    matched: str
    # ``decided``'s canonical text where written out here (``_admitted``).
    text: str | None = None
    match event:
        case ev.CallAdmitted() | ev.ApprovalRequired():
            tool, args, revision, version, matched = event.tool, event.args, event.revision, event.policy_version, event.rule
            effect = event.effect
            # type(), not isinstance: an admission's failed isinstance takes ABC's slow path.
            asked = ""
            if type(event) is ev.ApprovalRequired:
                decided.update(request_id=event.request_id, key=event.key)
                asked = f'"key":{_text(event.key)},"request_id":{_text(event.request_id)},'
            decided["idempotency_key"] = event.idempotency_key
            text = _admitted(event, call["seq"], asked)
        case ev.InvalidInput():
            tool, args, revision, version, matched = None, None, None, None, f"gate {event.gate}"
            decided["problems"] = [asdict(problem) for problem in event.problems]
        case ev.CheckRequired():
            tool, revision, matched = event.for_tool, event.revision, GATE_RULES[ev.CheckRequired]
            args, _, version = _settled(event.call)
            decided["missing"] = event.missing
        case ev.Denied() | ev.SecretsFound():
            tool, version, matched = event.tool, event.policy_version, event.rule if isinstance(event, ev.Denied) else ""
            args, revision, _ = _settled(event.call)
            decided["reason"] = event.reason
            if isinstance(event, ev.SecretsFound):
                decided["problems"] = [asdict(problem) for problem in event.problems]
        case ev.DuplicateEffect() | ev.WriteBlocked() | ev.ChangesRequested():
            tool, matched = event.tool, GATE_RULES.get(type(event), "")
            args, revision, version = _settled(event.call)
            if isinstance(event, ev.DuplicateEffect):
                decided["idempotency_key"] = event.idempotency_key
            elif isinstance(event, ev.ChangesRequested):
                decided.update(request_id=event.request_id, key=event.key)
    matched = by or matched or event.type
    inputs = gate_inputs(
        tool,
        content_digest(args) if args is not None else None,
        revision,
        version,
        matched,
        event.type,
        content_digest(effect) if effect is not None else None,
    )
    decided.update(tool=tool, decision=event.type)
    return {
        "kind": kind or GATE_KINDS[type(event)],
        "actor": rule(matched),
        "decided": decided,
        "shown": Shown(inputs, False, sha256(inputs)),
        "policy_version": version,
        "decided_text": text,
    }


def _admitted(event: ev.CallAdmitted | ev.ApprovalRequired, seq: int, asked: str) -> str:
    """The canonical JSON (ledger.verify.canonical) of an admission's ``decided`` as
    ``_gate`` makes it (``asked``: an ApprovalRequired's two keys more, written), key by
    key in canonical's order, as ``gate_inputs`` writes the inputs: the encoder and the
    check that the value is flat took some 22,000 instructions of a step's entry, this
    some 8,000. Held equal to the encoder's by tests/test_ledger_decisions.py."""
    return (
        f'{{"call":{_maybe(event.call_id)},"decision":{_text(event.type)},"idempotency_key":{_maybe(event.idempotency_key)},'
        f'{asked}"seq":{int(seq)},"tool":{_text(event.tool)}}}'
    )


def gate_inputs(
    tool: str | None, args: str | None, revision: str | None, version: int | None, matched: str, decision: str, effect: str | None
) -> bytes:
    """What a gate was shown, its rule's inputs: the canonical JSON (ledger.verify.canonical)
    of ``{"tool", "args", "revision", "policy_version", "rule", "decision", "effect"}``,
    written out key by key in canonical's order, as ledger.writer writes an entry's:
    the encoder took twice the instructions (some 23,000 a gate's decision).
    tests/test_ledger_decisions.py holds the two texts equal."""
    return (
        f'{{"args":{_maybe(args)},"decision":{_text(decision)},"effect":{_maybe(effect)},'
        f'"policy_version":{"null" if version is None else int(version)},"revision":{_maybe(revision)},'
        f'"rule":{_text(matched)},"tool":{_maybe(tool)}}}'
    ).encode()


# A JSON string as ``canonical`` encodes it (ensure_ascii=False).
_text = json.encoder.encode_basestring


def _maybe(text: str | None) -> str:
    return "null" if text is None else _text(text)


def _settled(record: CallRecord | None) -> tuple[dict[str, Any] | None, str | None, int | None]:
    """The arguments, revision before and policy version of the call's record a refusal carries."""
    return (record.args, record.revision_before, record.policy_version) if record is not None else (None, None, None)
