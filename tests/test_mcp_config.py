"""MCP servers as a project's configuration, the site admins' alone, and the pure
rules that make a server's tool a registry entry: its name, its version, its schema
and what the policy says of it (docs/design.md, Outside tools)."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse
from pytest_django import Settings

from core.errors import InputError
from core.mcp import McpTool, check_tool, mcp_spec, model_schema
from core.policy import Rule, authorize, check_policy
from core.tools import builtin_registry
from projects.models import AuditEntry, McpServer, Membership, Project, Role, default_project_id
from runs.services import check_new_run
from tests.runs_waiting import DEMO_CONTRACT, SCRIPTED_DEMO

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"title": {"type": "string", "maxLength": 20}, "idempotency_key": {"type": "string"}},
    "required": ["title", "idempotency_key"],
}


def tool(schema: dict[str, Any] = SCHEMA, name: str = "create_issue", server_version: str = "1.0") -> McpTool:
    return McpTool("tracker", server_version, name, "Open an issue", schema, {"readOnlyHint": True})


def test_it_versions_a_tool_by_its_server_and_schema_so_a_changed_schema_is_another_tool() -> None:
    widened = {**SCHEMA, "properties": {**SCHEMA["properties"], "labels": {"type": "array"}}}
    assert tool().version == tool().version
    assert len({tool().version, tool(widened).version, tool(server_version="1.1").version}) == 3


def test_it_checks_arguments_against_the_schema_without_the_key_harness_sets() -> None:
    spec = mcp_spec(tool(), read_only=[], key_arg="idempotency_key")
    registry = builtin_registry().with_tools([spec])
    assert spec.name == "tracker.create_issue" and "idempotency_key" not in str(spec.json_schema()["properties"])
    assert registry.validate(spec, {"title": "ok"}, ()) == {"title": "ok"}
    for args, field in (({"title": 5}, "args.title"), ({"title": "x" * 21}, "args.title"), ({}, "args")):
        with pytest.raises(InputError) as raised:
            registry.validate(spec, args, ())
        assert [p.field for p in raised.value.problems] == [field], args
    with pytest.raises(InputError, match="should not be valid"):
        registry.validate(spec, {"title": "ok", "idempotency_key": "mine"}, ())
    assert model_schema(SCHEMA, None) == SCHEMA


def test_it_takes_every_tool_as_an_effect_unless_the_policy_says_read_only_whatever_its_annotations() -> None:
    assert mcp_spec(tool(), read_only=[], key_arg=None).external_effect, "readOnlyHint decides nothing"
    assert not mcp_spec(tool(), read_only=["tracker.create_*"], key_arg=None).external_effect


def test_it_refuses_a_tool_whose_name_blurs_the_namespace_or_whose_schema_is_no_schema() -> None:
    for bad, said in ((tool(name="a.b"), "tool name"), (tool(name="*"), "tool name"), (tool({"type": "array"}), "type 'object'")):
        with pytest.raises(ValueError, match=said):
            check_tool(bad, None)
    with pytest.raises(ValueError, match="not a valid JSON Schema"):
        check_tool(tool({"type": "object", "properties": 5}), None)
    with pytest.raises(ValueError, match="does not take a string"):
        check_tool(tool({"type": "object", "properties": {"key": {"type": "integer"}}}), "key")
    with pytest.raises(ValueError, match="already in the registry"):
        builtin_registry().with_tools([mcp_spec(tool(), read_only=[], key_arg=None)]).with_tools(
            [mcp_spec(tool(), read_only=[], key_arg=None)]
        )


def test_it_matches_a_rule_pinned_to_a_version_only_at_that_version() -> None:
    pinned = Rule(name="reviewed", tool="tracker.*", decision="allow", version=tool().version)
    budget = {"max_proposals": 9, "max_tool_calls": 9, "max_attempts": 1, "wall_time_seconds": 60, "max_output_bytes_per_call": 4096}
    policy = check_policy({"version": 1, "rules": [pinned.model_dump()], "checks": [], "budget": budget})
    assert authorize(policy, "tracker.create_issue", {}, tool().version).decision == "allow"
    assert authorize(policy, "tracker.create_issue", {}, "0" * 16).decision == "deny"
    assert authorize(policy, "tracker.other", {}).decision == "deny", "a tool the policy does not name is denied"


@pytest.mark.django_db
def test_it_lets_a_contract_name_tools_of_its_projects_servers_alone(other_project: Project) -> None:
    McpServer.objects.create(project=other_project, name="elsewhere", url="http://127.0.0.1:9/mcp")
    McpServer.objects.create(project_id=default_project_id(), name="tracker", url="http://127.0.0.1:9/mcp")
    McpServer.objects.create(project_id=default_project_id(), name="off", url="http://127.0.0.1:9/mcp", enabled=False)
    check_new_run({**DEMO_CONTRACT, "allowed_tools": ["finish", "tracker.create_issue"]}, SCRIPTED_DEMO)
    for name in ("elsewhere.create_issue", "off.create_issue", "tracker.a.b", "tracker."):
        with pytest.raises(InputError, match="unknown tool"):
            check_new_run({**DEMO_CONTRACT, "allowed_tools": ["finish", name]}, SCRIPTED_DEMO)


def server_form(**fields: Any) -> dict[str, Any]:
    form = {
        "project": str(default_project_id()),
        "name": "tracker",
        "url": "https://mcp.example.com/tracker/mcp",
        "credential_env": "HARNESS_MCP_TRACKER_TOKEN",
        "idempotency_arg": "idempotency_key",
        "lookup_tool": "find_issue",
        "timeout_seconds": "30",
        "max_response_mb": "8",
        "enabled": "on",
    }
    return {**form, **fields}


@pytest.mark.django_db
def test_it_lets_site_admins_alone_add_a_server_on_the_allowlist_naming_its_tokens_variable(
    admin_user: User, other_project: Project, settings: Settings
) -> None:
    settings.MCP_ALLOWED_URLS = ["https://mcp.example.com/tracker/"]
    client = Client()
    client.force_login(admin_user)
    add = reverse("admin:projects_mcpserver_add")
    # The name's help reads whole: the admin shows help as HTML, where "<name>" vanished ("named .:").
    assert "a server named 'github' offers its tool 'search' as 'github.search'" in client.get(add).content.decode()
    for bad, said in (
        ({"url": "https://evil.example.com/mcp"}, "is not on HARNESS_MCP_ALLOWED_URLS"),
        ({"credential_env": "sk-live-1234"}, "not the token itself"),
        ({"name": "Tracker"}, "starting with a letter</li>"),  # the error, not the help beside it
    ):
        page = client.post(add, server_form(**bad))
        assert page.status_code == 200 and said in page.content.decode(), bad
    assert not McpServer.objects.exists()
    assert client.post(add, server_form()).status_code == 302
    server = McpServer.objects.get()
    [entry] = AuditEntry.objects.filter(action="mcp_server_saved")
    assert entry.actor == admin_user and entry.detail["url"] == server.url and entry.detail["credential_env"] == "HARNESS_MCP_TRACKER_TOKEN"

    staff = User.objects.create_user("sam-staff", password="sam-staff-pass-123", is_staff=True)
    Membership.objects.create(project=other_project, user=staff, role=Role.ADMIN)
    client.force_login(staff)
    assert client.get(reverse("admin:projects_mcpserver_changelist")).status_code == 403
    assert client.post(add, server_form(name="other")).status_code == 403


def test_it_offers_a_model_the_tool_under_a_name_its_api_takes_and_proposes_it_under_the_registrys() -> None:
    from adapters.calls import ToolCall
    from adapters.context import TaskContext, ToolDef
    from adapters.openai_adapter import OpenAIProposer
    from adapters.pricing import Budget
    from core.scenarios import demo_contract

    spec = mcp_spec(tool(), read_only=[], key_arg="idempotency_key")
    offered = ToolDef.from_spec(spec)
    assert (offered.name, offered.registry_name) == ("tracker__create_issue", "tracker.create_issue")
    assert ToolDef.from_spec(builtin_registry().finish()).registry_name == ""
    proposer = OpenAIProposer(
        model="m", api_key="k", context=TaskContext.from_contract(demo_contract()), tools=[offered], budget=Budget(10, 1.0), price=None
    )
    proposer.queue = [ToolCall("c1", "tracker__create_issue", {"title": "t"})]
    assert proposer._take_next() == {"tool": "tracker.create_issue", "args": {"title": "t"}}


def test_it_keeps_an_interrupted_call_of_a_tool_its_server_no_longer_lists_pending_not_failed() -> None:
    from core import events as ev
    from core.call_record import CallRecord
    from core.pending import recover_in_flight
    from core.scenarios import build_rig

    rig = build_rig([])
    # The ledger is set by hand here, not by events: the store's check that every
    # state is the fold of its log is off for this one.
    rig.store.verify = False
    state = rig.harness.context.state
    key = "a" * 32
    state.ledger["c9"] = CallRecord(call_id="c9", tool="tracker.create_issue", state="started", attempts=1, idempotency_key=key)
    state.current_call = "c9"
    assert rig.harness.context.registry.get("tracker.create_issue") is None
    recover_in_flight(rig.harness.context)
    [pending] = [e for e in rig.store.events if isinstance(e, ev.PendingEffectRecorded)]
    assert (pending.tool, pending.kind, pending.idempotency_key) == ("tracker.create_issue", "external", key)
    [resumed] = [e for e in rig.store.events if isinstance(e, ev.RunResumed)]
    assert resumed.recovery == "pending"


@pytest.mark.django_db
def test_it_takes_a_server_over_stdio_as_a_command_list_and_refuses_both_or_neither_transport(admin_user: User, settings: Settings) -> None:
    settings.MCP_ALLOWED_URLS = ["https://mcp.example.com/tracker/"]
    client = Client()
    client.force_login(admin_user)
    add = reverse("admin:projects_mcpserver_add")
    command = '["/opt/harness-mcp/bin/workspace-search"]'
    for bad, said in (
        ({"command": command}, "not both or neither"),
        ({"url": ""}, "not both or neither"),
        ({"url": "", "command": '"python3 server.py"'}, "a JSON list of non-empty strings"),
        ({"url": "", "command": '["python3", ""]'}, "a JSON list of non-empty strings"),
    ):
        page = client.post(add, server_form(**bad))
        assert page.status_code == 200 and said in page.content.decode(), bad
    assert not McpServer.objects.exists()
    assert client.post(add, server_form(name="search", url="", credential_env="", command=command)).status_code == 302
    server = McpServer.objects.get()
    assert server.command == ["/opt/harness-mcp/bin/workspace-search"] and server.url == ""
    [entry] = AuditEntry.objects.filter(action="mcp_server_saved")
    assert entry.detail["command"] == server.command
