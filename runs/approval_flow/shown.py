"""What the approval page shows a reviewer, as one value: the request's call (tool,
arguments, revision, policy version, rule, key), its diff, its fixed effect and the
words "If granted" says of it, the evidence for its revision and what the secret scan
found. The page (pages.approvals) renders these pieces from this value, and a decision
records the digest of its canonical bytes (``Review.digest``) in its event and in the
decision ledger, so the entry names exactly the content the decider had in front of
them (docs/design.md, Decision ledger). A page posts back the digest it showed;
a decision whose content has changed since is refused."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from approvals.models import ApprovalRequest
from core import events as ev
from core.effects import parse_effect, summary
from core.tools import builtin_registry
from ledger.writer import Shown
from runs.models import Event, Evidence, Run
from runs.persistence.store import load_state


@dataclass(frozen=True)
class Review:
    """The approval page's content for one request (``value``), and the rows and
    records it was made of, for the page to render."""

    value: dict[str, Any]
    evidence: list[Evidence] = field(default_factory=list)
    egress: dict[str, list[ev.EgressSummary]] = field(default_factory=dict)

    @property
    def shown(self) -> Shown:
        return Shown.of(self.value)

    @property
    def digest(self) -> str:
        return self.shown.digest

    @property
    def what_it_does(self) -> str:
        return str(self.value["if_granted"])

    @property
    def secret_findings(self) -> list[dict[str, Any]]:
        return list(self.value["secret_findings"])


def reviewer_summary(tool: str, effect: object) -> str:
    """What granting this call does: for an external effect, in the words of where its
    fixed effect goes (the outbox, a branch of a remote, a forge); else the tool's
    registry entry."""
    if effect is not None:
        return summary(parse_effect(effect))
    spec = builtin_registry().get(tool)
    return spec.reviewer_summary if spec is not None else ""


def review_of(request: ApprovalRequest, run: Run | None = None) -> Review:
    """What the approval page shows of ``request`` now."""
    run = run or Run.objects.only("state").get(pk=request.run_id)
    state = load_state(run)
    rows = list(Evidence.objects.filter(run_id=request.run_id, revision=request.revision).order_by("recorded_at", "id"))
    egress = {record.call_id: record.egress for record in state.evidence}
    row = Event.objects.filter(run_id=request.run_id, call_id=request.call_id, type=ev.type_name(ev.SecretsFound)).order_by("-seq").first()
    found = row.typed() if row is not None else None
    value: dict[str, Any] = {
        "request": str(request.pk),
        "run": str(request.run_id),
        "call": request.call_id,
        "tool": request.tool,
        "args": request.args,
        "revision": request.revision,
        "policy_version": request.policy_version,
        "rule": request.rule,
        "key": request.key,
        "needed": request.needed,
        "diff": request.diff or "",
        "effect": request.effect,
        "if_granted": reviewer_summary(request.tool, request.effect),
        "evidence": [
            {
                "check_id": row.check_id,
                "passed": row.passed,
                "exit_code": row.exit_code,
                "timed_out": row.timed_out,
                "duration_ms": row.duration_ms,
                "command": row.command,
                "revision": row.revision,
                "output_ref": row.output_ref,
                "network": [summary.model_dump(mode="json") for summary in egress.get(row.call_id, [])],
            }
            for row in rows
        ],
        "secret_findings": list(found.findings) if isinstance(found, ev.SecretsFound) else [],
    }
    return Review(value, rows, egress)
