"""The projects' audit trail: who changed what in a project (its members, its switches,
its settings), and when. Written by the code that makes the change, in its transaction,
so a change is never without its entry. Each audit entry is a decision too: ``record``
writes its decision ledger entry beside it, in the same transaction (ledger.writer), so
every admin's change of a policy, a membership, a group mapping, a token, a budget, an
MCP server or a setting is chained with every other decision."""

from __future__ import annotations

from typing import Any

from ledger import writer as ledger
from projects.models import AuditEntry, Project


def record(project: Project | None, actor: Any, action: str, **detail: Any) -> AuditEntry:
    """One entry; ``actor`` is the person who made the change (None: the server itself)."""
    person = actor if getattr(actor, "pk", None) is not None and getattr(actor, "is_authenticated", False) else None
    entry = AuditEntry.objects.create(project=project, actor=person, action=action, detail=detail)
    # What the admin decided is the change itself: the action and its detail, as the
    # audit keeps them.
    change = {"action": action, "detail": entry.detail}
    ledger.record(
        ledger.Decision(
            kind=f"admin.{action}",
            actor=ledger.person(person),
            decided={**change, "audit": entry.pk},
            shown=ledger.Shown.of(change),
            project_id=project.pk if project is not None else None,
            run_id=str(detail.get("run", "")) if isinstance(detail.get("run"), str) else "",
        )
    )
    return entry
