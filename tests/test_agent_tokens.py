"""An external agent's token (runs.agents.tokens) opens its own run while the run is
active, and nothing else; every refusal is audited, never with the token."""

from __future__ import annotations

from typing import Literal

import pytest

from projects.models import AuditEntry
from runs.agents import tokens
from runs.models import AgentToken, Run
from tests.helpers import World

pytestmark = [pytest.mark.django_db]


def test_it_opens_its_own_active_run_and_keeps_only_a_digest() -> None:
    run = World().create()
    token = tokens.mint(run)
    assert token.startswith(tokens.PREFIX)
    assert tokens.authenticate(token, run.pk, where="mcp") == run
    assert not AgentToken.objects.filter(digest__contains=token[len(tokens.PREFIX) :]).exists()
    assert AuditEntry.objects.filter(action="agent_token_refused").count() == 0


@pytest.mark.parametrize(
    ("shown", "status", "reason"),
    [(None, 401, "no token"), ("", 401, "no token"), ("harness-run-guess", 401, "unknown token")],
)
def test_it_refuses_no_token_or_an_unknown_one(shown: str | None, status: Literal[401, 404], reason: str) -> None:
    run = World().create()
    tokens.mint(run)
    assert tokens.authenticate(shown, run.pk, where="mcp") == tokens.Refused(status, reason)


def test_it_refuses_another_runs_token_without_telling_the_run_exists() -> None:
    mine, theirs = World().create(), World().create()
    token = tokens.mint(mine)
    refused = tokens.authenticate(token, theirs.pk, where="model proxy")
    assert refused == tokens.Refused(404, f"a token of run {mine.pk}")
    entry = AuditEntry.objects.get(action="agent_token_refused")
    assert entry.project == theirs.project
    assert entry.detail == {"run": str(theirs.pk), "where": "model proxy", "status": 404, "reason": f"a token of run {mine.pk}"}
    assert token not in str(entry.detail)


def test_it_refuses_an_ended_runs_token_and_a_replaced_one() -> None:
    run = World().create()
    first = tokens.mint(run)
    second = tokens.mint(run)
    assert tokens.authenticate(first, run.pk, where="mcp") == tokens.Refused(401, "a replaced token")
    Run.objects.filter(pk=run.pk).update(status=Run.Status.COMPLETE)
    assert tokens.authenticate(second, run.pk, where="mcp") == tokens.Refused(401, "the run has ended (complete)")
    tokens.revoke(run.pk)
    assert AgentToken.objects.filter(run=run, revoked_at__isnull=True).count() == 0


def test_it_refuses_a_path_that_names_no_run() -> None:
    assert tokens.authenticate("harness-run-x", "not-a-uuid", where="mcp") == tokens.Refused(401, "unknown token")
    assert AuditEntry.objects.get(action="agent_token_refused").project is None
