"""The projects' audit trail: who changed what in a project (its members, its switches,
its settings), and when. Written by the code that makes the change, in its transaction,
so a change is never without its entry."""

from __future__ import annotations

from typing import Any

from projects.models import AuditEntry, Project


def record(project: Project | None, actor: Any, action: str, **detail: Any) -> AuditEntry:
    """One entry; ``actor`` is the person who made the change (None: the server itself)."""
    person = actor if getattr(actor, "pk", None) is not None and getattr(actor, "is_authenticated", False) else None
    return AuditEntry.objects.create(project=project, actor=person, action=action, detail=detail)
