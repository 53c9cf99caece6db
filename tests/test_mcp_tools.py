"""Tools from an MCP server under Harness's gates (docs/design.md, Outside tools): whole
runs driven in this process (runs.runtime.advance) against the tracker MCP server
written with the official SDK (tests/mcp_servers/tracker.py), started by the tests on
a free loopback port, its token in this worker's environment only."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.utils.html import escape
from pytest_django import Settings
from rest_framework.test import APIClient

from approvals.models import ApprovalRequest
from projects.models import McpServer, default_project_id
from runs.models import Event, Evidence, Run
from runs.persistence.artifacts import ArtifactStorage
from runs.runtime import advance, create_run
from sandbox.mcp.config import McpServerConfig
from sandbox.tools.mcp import McpTools
from tests.helpers import new_policy_version
from tests.mcp_servers.running import TOKEN, TOKEN_ENV, Tracker, tracker
from tests.runs_waiting import DEMO_CONTRACT

pytestmark = [pytest.mark.docker, pytest.mark.slow, pytest.mark.django_db(transaction=True)]

TITLE = "Totals <b>negative</b>"
BODY = "Seen in orders/total.py"
READ_ONLY = ["tracker.search_issues", "tracker.find_issue", "tracker.dump", "tracker.wait_forever"]
ENV_CHECK = {"check_id": "env", "command": ["env"], "version": "1", "timeout_seconds": 60}


@pytest.fixture
def server(tmp_path: Path, settings: Settings, monkeypatch: pytest.MonkeyPatch, docker_engine: Any) -> Iterator[Tracker]:
    settings.WORKSPACE_ROOT = tmp_path / "workspaces"
    settings.SPOOL_DIR = tmp_path / "spool"
    # The worker is this process: its environment holds the token, by the row's name.
    monkeypatch.setenv(TOKEN_ENV, TOKEN)
    with tracker(tmp_path / "tracker") as running:
        allow(settings, running)
        McpServer.objects.create(
            project_id=default_project_id(),
            name="tracker",
            url=running.url,
            credential_env=TOKEN_ENV,
            idempotency_arg="idempotency_key",
            lookup_tool="find_issue",
            timeout_seconds=15,
            max_response_mb=1,
        )
        yield running


def allow(settings: Settings, running: Tracker) -> None:
    settings.MCP_ALLOWED_URLS = [running.url]
    McpServer.objects.filter(name="tracker").update(url=running.url)


def policy(*rules: dict[str, Any], read_only: list[str] = READ_ONLY) -> None:
    new_policy_version(
        rules=[
            {"name": "finishing", "tool": "finish", "decision": "allow"},
            {"name": "the env check", "tool": "run_check", "decision": "allow"},
            *rules,
        ],
        read_only_tools=read_only,
        checks=[ENV_CHECK],
    )


def start(operator: User, *script: dict[str, Any]) -> Run:
    """A run of ``script`` between the env check (its evidence: finishing needs one) and finish."""
    tools = sorted({"run_check", *(step["tool"] for step in script)})
    contract = {**DEMO_CONTRACT, "allowed_tools": tools, "verification_targets": ["env"]}
    steps = [{"tool": "run_check", "args": {"check_id": "env"}}, *script, {"tool": "finish", "args": {"summary": "done"}}]
    return create_run(contract, {"kind": "scripted", "script": steps}, operator, enqueue=False)


def call(tool: str, **args: Any) -> dict[str, Any]:
    return {"tool": f"tracker.{tool}", "args": args}


def events(run: Run, kind: str | None = None) -> list[dict[str, Any]]:
    found = Event.objects.filter(run=run).order_by("seq")
    if kind is not None:
        found = found.filter(type=kind)
    return [{"type": e.type, **e.payload} for e in found]


def listed_version(running: Tracker, tool: str) -> str:
    config = McpServerConfig("tracker", running.url, TOKEN_ENV, "idempotency_key")
    [spec] = [s for s in McpTools([config], {TOKEN_ENV: TOKEN}).discover([]) if s.name == f"tracker.{tool}"]
    return spec.version


def grant(request: ApprovalRequest, reviewer: User) -> None:
    api = APIClient()
    api.force_login(reviewer)
    answer = api.post(f"/api/approvals/{request.pk}/grant/")
    assert answer.status_code == 200, answer.content


def test_it_creates_an_issue_once_and_only_after_a_grant_bound_to_its_exact_arguments(
    server: Tracker, operator: User, reviewer: User
) -> None:
    policy(
        {"name": "issues need a reviewer", "tool": "tracker.create_issue", "decision": "ask"},
        {"name": "searching is free", "tool": "tracker.search_issues", "decision": "allow"},
    )
    run = start(
        operator,
        call("search_issues", query="Totals"),
        call("create_issue", title=TITLE, body=BODY),
        call("create_issue", title=TITLE, body=BODY),
    )
    assert advance(str(run.pk)) == "waiting_approval"
    assert server.issues() == [], "nothing is created before a grant"
    request = ApprovalRequest.objects.get(run=run, status="pending")
    version = listed_version(server, "create_issue")
    effect = request.effect
    assert effect is not None and effect["kind"] == "mcp"
    assert (effect["server"], effect["tool"], effect["version"], effect["endpoint"]) == ("tracker", "create_issue", version, server.url)
    key = effect["arguments"]["idempotency_key"]
    assert effect["arguments"] == {"title": TITLE, "body": BODY, "idempotency_key": key} and len(key) == 32
    # The reviewer's page: server, tool, version and each argument as its schema names it.
    page = Client()
    page.force_login(reviewer)
    shown = page.get(f"/approvals/{request.pk}/").content.decode()
    for part in ("tracker", "create_issue", version, "title (string, required): Title", escape(json.dumps(TITLE))):
        assert part in shown, part
    assert "<b>negative</b>" not in shown, "the server's and the model's text is escaped"

    grant(request, reviewer)
    assert advance(str(run.pk)) == "complete"
    [issue] = server.issues()
    assert (issue["title"], issue["body"], issue["idempotency_key"]) == (TITLE, BODY, key)
    [duplicate] = events(run, "duplicate_effect")
    assert duplicate["idempotency_key"] == key
    [searched] = [e for e in events(run, "receipt_recorded") if e["tool"] == "tracker.search_issues"]
    assert searched["receipt"]["data"]["untrusted"] is True

    # The token reached the server (it answers nothing without it) and nothing else:
    # no event, request, page, artifact, nor the sandbox's environment (the env check's output).
    assert TOKEN not in json.dumps(events(run)) and TOKEN not in json.dumps([request.effect, request.args, request.diff])
    assert TOKEN not in shown and TOKEN not in page.get(f"/runs/{run.pk}/").content.decode()
    evidence = Evidence.objects.get(run=run)
    assert evidence.output_ref is not None
    output = ArtifactStorage(str(run.pk)).get(evidence.output_ref).decode()
    assert "PATH=" in output and TOKEN not in output and TOKEN_ENV not in output


def test_it_keeps_an_unanswered_create_pending_then_finds_it_by_its_key_without_sending_it_again(
    server: Tracker, operator: User, reviewer: User
) -> None:
    McpServer.objects.filter(name="tracker").update(timeout_seconds=3)
    policy({"name": "issues need a reviewer", "tool": "tracker.create_issue", "decision": "ask"})
    server.fault("hang")  # the server creates the issue, then answers nothing
    run = start(operator, call("create_issue", title=TITLE))
    assert advance(str(run.pk)) == "waiting_approval"
    grant(ApprovalRequest.objects.get(run=run, status="pending"), reviewer)
    assert advance(str(run.pk)) == "complete"
    [issue] = server.issues()
    [pending] = events(run, "pending_effect_recorded")
    assert pending["kind"] == "external" and pending["idempotency_key"] == issue["idempotency_key"]
    [reconciled] = events(run, "effect_reconciled")
    assert reconciled["applied"] is True and "find_issue" in reconciled["detail"]
    started = [e for e in events(run, "call_started") if e["tool"] == "tracker.create_issue"]
    assert len(started) == 1 and not events(run, "retry"), "an effect of unknown outcome is never sent again"


def test_it_applies_no_approval_of_a_tool_whose_schema_changed(server: Tracker, operator: User, reviewer: User, settings: Settings) -> None:
    old = listed_version(server, "create_issue")
    policy(
        {"name": "the reviewed version", "tool": "tracker.create_issue", "decision": "allow", "version": old},
        {"name": "any other needs a reviewer", "tool": "tracker.create_issue", "decision": "ask"},
    )
    first = start(operator, call("create_issue", title="first"))
    assert advance(str(first.pk)) == "complete"
    assert [i["title"] for i in server.issues()] == ["first"]

    server.fault("v2")  # create_issue takes labels now
    server.restart()
    allow(settings, server)
    new = listed_version(server, "create_issue")
    assert new != old
    second = start(operator, call("create_issue", title="second"))
    assert advance(str(second.pk)) == "waiting_approval", "the rule for the old version does not match the new one"
    request = ApprovalRequest.objects.get(run=second, status="pending")
    assert request.effect is not None and request.effect["version"] == new

    server.fault("v2", on=False)  # changed back before the grant is used
    server.restart()
    allow(settings, server)
    grant(request, reviewer)
    advance(str(second.pk))
    [receipt] = [e for e in events(second, "receipt_recorded") if e["tool"] == "tracker.create_issue"]
    assert "nothing was sent" in receipt["receipt"]["data"]["error"]
    assert [i["title"] for i in server.issues()] == ["first"]


def test_it_refuses_or_stops_what_the_gates_and_the_bounds_do_not_let_through(server: Tracker, operator: User) -> None:
    policy(
        {"name": "reads", "tool": "tracker.dump", "decision": "allow"},
        {"name": "reads", "tool": "tracker.wait_forever", "decision": "allow"},
        {"name": "writes", "tool": "tracker.create_issue", "decision": "allow"},
        {"name": "writes", "tool": "tracker.delete_project", "decision": "allow"},
        {"name": "what claims to read only", "tool": "tracker.close_all", "decision": "ask"},
    )
    server.fault("flood")
    McpServer.objects.filter(name="tracker").update(timeout_seconds=20)
    run = start(
        operator,
        call("create_issue", title=5),
        call("create_issue", title="t", idempotency_key="mine"),
        call("dump"),
        call("delete_project"),
        call("close_all"),
    )
    assert advance(str(run.pk)) == "waiting_approval"
    invalid = events(run, "invalid_input")
    assert [p["field"] for p in invalid[0]["problems"]] == ["args.title"]
    assert "idempotency_key" in json.dumps(invalid[1]["problems"])
    received = {e["tool"]: e["receipt"]["data"] for e in events(run, "receipt_recorded")}
    assert "sent more than 1048576 bytes" in received["tracker.dump"]["error"]
    assert "elicitation" in received["tracker.delete_project"]["error"], "the server's question is refused, not answered"
    # Its annotations say read-only; the policy does not, so it is an effect: keyed and asked for.
    request = ApprovalRequest.objects.get(run=run, status="pending")
    assert request.tool == "tracker.close_all" and request.effect is not None and request.effect["kind"] == "mcp"
    assert server.issues() == []

    hanging = start(operator, call("wait_forever"))
    McpServer.objects.filter(name="tracker").update(timeout_seconds=3)
    assert advance(str(hanging.pk)) == "complete"
    [waited] = [e for e in events(hanging, "receipt_recorded") if e["tool"] == "tracker.wait_forever"]
    assert "did not answer within 3s" in waited["receipt"]["data"]["error"]

    unnamed = start(operator, call("search_issues", query="x"))
    assert advance(str(unnamed.pk)) == "tool_denied"
    [denied] = events(unnamed, "denied")
    assert denied["rule"] == "default: no rule matched"
