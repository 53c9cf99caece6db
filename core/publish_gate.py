"""The secret gate of an external call: what the findings of the scan of its change
mean under the policy (``Policy.publish_checks``). The workspace scans (the port's
``plan`` hands the findings in with the fixed effect: common.secret_scan); this only
decides, so the loop acts on a plain decision. Added lines holding hidden characters
(core.visible) are findings of the same gate under ``hidden_characters: refuse``.

- no finding, or each one on the policy's allowlist (file and fingerprint): clear;
- ``secrets: refuse``: the call is refused before anyone is asked, and the model is
  told each file, line and kind so it can take the secret out;
- ``secrets: ask``: a reviewer must grant the call with the findings in front of them;
  under a rule that asks nobody there is nobody to show them to, so it is refused;
- ``hidden_characters: refuse`` and a line the change adds holds one: refused, the
  model told each file, line and code point (``show``: the reviewer's page names them)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from core.errors import FieldProblem
from core.jsonutil import JSON
from core.policy import PublishChecks
from core.visible import HIDDEN_KIND, hidden_in_patch

SECRETS_GATE = "secrets"


@dataclass(frozen=True)
class Screening:
    decision: Literal["clear", "refuse", "ask"]
    # The findings that count, and those the allowlist excused.
    findings: list[dict[str, JSON]] = field(default_factory=list)
    allowed: list[dict[str, JSON]] = field(default_factory=list)
    reason: str = ""


def hidden_findings(rules: PublishChecks, shown: str) -> list[dict[str, JSON]]:
    """The lines the change shown adds that hold hidden characters, as findings (file,
    line, kind, the code points), when the policy refuses them; none under ``show``."""
    if rules.hidden_characters != "refuse":
        return []
    return [
        {"path": h.path, "line": h.line, "kind": HIDDEN_KIND, "chars": h.code_points} for h in hidden_in_patch(shown) if h.kind == "added"
    ]


def screen(rules: PublishChecks, findings: Sequence[Mapping[str, JSON]], asks_reviewer: bool) -> Screening:
    allowed = {(a.path, a.fingerprint) for a in rules.allowed_secrets}
    counted = [dict(f) for f in findings if (f.get("path"), f.get("fingerprint")) not in allowed]
    excused = [dict(f) for f in findings if (f.get("path"), f.get("fingerprint")) in allowed]
    if not counted:
        return Screening("clear", counted, excused)
    if any(f.get("kind") == HIDDEN_KIND for f in counted):
        return Screening("refuse", counted, excused, "the policy refuses a publish whose change adds hidden characters")
    if rules.secrets == "ask" and asks_reviewer:
        return Screening("ask", counted, excused, "a reviewer must grant it having seen the findings")
    if rules.secrets == "ask":
        return Screening("refuse", counted, excused, "the policy asks a reviewer about secrets, but no reviewer is asked about this call")
    return Screening("refuse", counted, excused, "the policy refuses a publish that holds a secret")


def problems(screening: Screening) -> list[FieldProblem]:
    """What the model is told of a refusal: where each finding is and what it is
    (never the value: it wrote it, and the records must not hold it)."""
    told = [
        FieldProblem(
            f"{f.get('path')}:{f.get('line')}",
            f"holds characters that hide or reorder text ({f.get('chars')}); take them out of the change"
            if f.get("kind") == HIDDEN_KIND
            else f"looks like a secret ({f.get('kind')}); take it out of the change",
        )
        for f in screening.findings
    ]
    return [*told, FieldProblem("change", f"nothing was published: {screening.reason}")]
