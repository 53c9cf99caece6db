"""The run-scoped token an external agent holds. It opens the run's MCP endpoint and
model proxy (gateway) while the run is active, and nothing else: not another run's,
not an ended run's. Every refusal is audited with why, never with the token."""

from __future__ import annotations

import hashlib
import secrets
import uuid
from dataclasses import dataclass
from typing import Literal

from django.db import transaction
from django.utils import timezone

from projects import audit
from runs.models import AgentToken, Run

# Recognisable in a leaked log or a secret scan; the rest is 256 random bits.
PREFIX = "harness-run-"
ACTIVE = (Run.Status.RUNNING, Run.Status.WAITING)


@dataclass(frozen=True)
class Refused:
    """Why a request was refused: 401 when no valid token was shown at all, 404 when a
    valid token was shown for a run it does not open (that run's existence is not told)."""

    status: Literal[401, 404]
    reason: str


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def mint(run: Run) -> str:
    """A new token for ``run``; the ones it had before stop working (one agent per run)."""
    token = PREFIX + secrets.token_urlsafe(32)
    with transaction.atomic():
        AgentToken.objects.filter(run=run, revoked_at__isnull=True).update(revoked_at=timezone.now())
        AgentToken.objects.create(run=run, digest=_digest(token))
    return token


def revoke(run_id: uuid.UUID | str, token: str | None = None) -> None:
    """The run's tokens stop working (only ``token``, if given: a worker letting its
    agent go must not revoke the one a worker that took the run over has minted)."""
    held = AgentToken.objects.filter(run_id=run_id, revoked_at__isnull=True)
    if token is not None:
        held = held.filter(digest=_digest(token))
    held.update(revoked_at=timezone.now())


def authenticate(token: str | None, run_id: uuid.UUID | str, *, where: str) -> Run | Refused:
    """The run ``token`` opens at ``where`` (e.g. "mcp", "model proxy"), or why not."""
    refused = _check(token, run_id)
    if isinstance(refused, Refused):
        row = Run.objects.filter(pk=run_id).only("project_id").first() if _is_uuid(run_id) else None
        project = row.project if row is not None else None
        audit.record(project, None, "agent_token_refused", run=str(run_id), where=where, status=refused.status, reason=refused.reason)
    return refused


def _check(token: str | None, run_id: uuid.UUID | str) -> Run | Refused:
    if not token:
        return Refused(401, "no token")
    # With the run's project, which the model proxy's budget check reads (runs.agents.usage.check),
    # and without the run's large fields, which no holder of a token is shown.
    found = AgentToken.objects.select_related("run__project").defer("run__state", "run__contract", "run__objective")
    held = found.filter(digest=_digest(token)).first()
    if held is None:
        return Refused(401, "unknown token")
    if str(held.run_id) != str(run_id):
        return Refused(404, f"a token of run {held.run_id}")
    if held.revoked_at is not None:
        return Refused(401, "a replaced token")
    if held.run.status not in ACTIVE:
        return Refused(401, f"the run has ended ({held.run.status})")
    return held.run


def _is_uuid(value: uuid.UUID | str) -> bool:
    try:
        uuid.UUID(str(value))
    except ValueError:
        return False
    return True
