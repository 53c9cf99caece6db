"""A run's MCP endpoint (gateway.mcp_endpoint) driven by the MCP SDK's own client against
the real ASGI server (Daphne), with a real Celery worker driving the run: every
``tools/call`` is a proposal of the run, through the same gates, approvals and sandbox
as a built-in one (docs/design.md, Agents)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any

import httpx2
import pytest
import redis.asyncio as aioredis
from django.conf import settings
from django.contrib.auth.models import User

from approvals.models import ApprovalRequest, PolicyVersion
from approvals.policies import current_policy_row
from gateway.mcp_server import answer_of
from projects.models import AuditEntry, Project
from runs.agents.bridge import AsyncBridge
from runs.agents.tokens import mint
from runs.approval_flow.flow import deny, grant
from runs.control import kill
from runs.models import Event, Run
from runs.runtime import create_run
from tests.agent_client import Answer, call, call_answered, call_later, endpoint, list_tools
from tests.fixtures_services import Worker
from tests.fixtures_web import AsgiServer
from tests.runs_waiting import DEMO_CONTRACT, DEMO_SCRIPT, wait_for

AGENT = {"kind": "agent", "preset": "mcp-client"}
WAIT_SECONDS = 4  # the server's HARNESS_AGENT_CALL_WAIT_SECONDS here: a client's "timeout" comes soon


@pytest.fixture
def web(transactional_db: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[AsgiServer]:
    server = AsgiServer(tmp_path_factory.mktemp("daphne"), HARNESS_AGENT_CALL_WAIT_SECONDS=str(WAIT_SECONDS))
    server.start()
    try:
        yield server
    finally:
        server.stop()


def writes_need_a_reviewer(project: Project | None = None) -> None:
    row = current_policy_row(project.pk if project is not None else None)
    document = dict(row.document)
    document["rules"] = [{**rule, "decision": "ask"} if rule["tool"] == "write_file" else rule for rule in document["rules"]]
    document["version"] = row.version + 1
    PolicyVersion.objects.create(project=row.project, version=row.version + 1, document=document, note="writes are asked for")


def agent_run(operator: User, contract: dict[str, Any] | None = None, project: str | None = None) -> tuple[Run, str]:
    run = create_run(contract or DEMO_CONTRACT, AGENT, operator, project=project)
    return run, mint(run)


def post_initialize(url: str, token: str | None) -> httpx2.Response:
    headers = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
    }
    return httpx2.post(url, json=body, headers=headers, timeout=10)


def refusals(run: Run) -> list[dict[str, Any]]:
    """Oldest first."""
    entries = AuditEntry.objects.filter(action="agent_token_refused").order_by("at", "pk")
    return [e.detail for e in entries if e.detail.get("run") == str(run.pk)]


def wait_until(predicate: Any, timeout: float = 60, log: Any = lambda: "") -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, log()[-4000:]
        time.sleep(0.1)


def events(run: Run, kind: str) -> list[Event]:
    return list(Event.objects.filter(run=run, type=kind).order_by("seq"))


def test_it_lists_each_runs_own_tools_and_refuses_other_tokens(
    web: AsgiServer, operator: User, other_project: Project, other_member: User
) -> None:
    reading = {**DEMO_CONTRACT, "allowed_tools": ["list_files", "read_file", "finish"]}
    run, token = agent_run(operator, reading)
    tools = {tool.name: tool for tool in list_tools(endpoint(web.url, run.pk), token)}
    assert sorted(tools) == ["finish", "list_files", "read_file"]
    assert tools["read_file"].input_schema["properties"]["path"]["type"] == "string"
    assert "sandboxed workspace" in (tools["read_file"].description or "")
    assert "allowed" in (tools["read_file"].description or "")

    # Another project's run, whose policy asks for every write.
    writes_need_a_reviewer(other_project)
    writing, writing_token = agent_run(other_member, DEMO_CONTRACT, project=other_project.slug)
    listed = {tool.name: tool for tool in list_tools(endpoint(web.url, writing.pk), writing_token)}
    assert {"write_file", "apply_patch", "publish", "run_check", "finish"} <= set(listed)
    assert "needs a reviewer's approval" in (listed["publish"].description or "")
    assert "needs a reviewer's approval" in (listed["write_file"].description or "")
    assert "orders/*" in (listed["write_file"].description or "")
    assert "needs a reviewer" not in (tools["read_file"].description or "")

    # Another run's token: 404 (that run's existence is not told); none: 401; each audited.
    wrong = post_initialize(endpoint(web.url, run.pk), writing_token)
    assert wrong.status_code == 404, wrong.text
    missing = post_initialize(endpoint(web.url, run.pk), None)
    assert missing.status_code == 401 and missing.headers["www-authenticate"].startswith("Bearer")
    assert [r["status"] for r in refusals(run)] == [404, 401]


def test_it_hands_over_an_answer_written_just_after_the_last_wait_slice(transactional_db: None, operator: User) -> None:
    """The run's answer lands after the endpoint's last wait slice ended, while it reads
    what the call waits for (the moment it tells the client's progress): the agent is
    handed that answer, not told "still waiting; call again"."""
    run, _token = agent_run(operator)
    told: list[str] = []

    async def scenario() -> tuple[str, bool]:
        client = aioredis.Redis.from_url(settings.REDIS_URL)
        try:
            bridge = AsyncBridge(str(run.pk), client)
            submitted = await bridge.submit("read_file", {"path": "orders/total.py"})

            async def answered_meanwhile(step: int, why: str) -> None:
                told.append(why)
                # As the run's worker answers a call (runs.agents.proposer), through the same script.
                assert await bridge.answer(submitted.request_id, "read_file ran (call c1)", False, "result")

            # A wait shorter than one slice: the deadline has passed when the answer lands.
            return await answer_of(bridge, submitted.request_id, "read_file", 0.05, answered_meanwhile)
        finally:
            await client.aclose()

    assert asyncio.run(scenario()) == ("read_file ran (call c1)", False)
    assert told == ["waiting for the run's worker to take the call"], told


@pytest.mark.celery
@pytest.mark.docker
def test_it_reads_refuses_invalid_arguments_checks_and_finishes(web: AsgiServer, celery_worker: Worker, operator: User) -> None:
    run, token = agent_run(operator)
    url = endpoint(web.url, run.pk)
    read = call_answered(url, token, "read_file", {"path": "orders/total.py"})
    assert not read.is_error and "def order_total" in read.text, read.text

    invalid = call_answered(url, token, "read_file", {"path": "orders/total.py", "lines": 3})
    assert invalid.is_error and "lines" in invalid.text and "Nothing was executed" in invalid.text, invalid.text

    early = call_answered(url, token, "finish", {"summary": "done"})
    assert early.is_error and "no passing check" in early.text and "tests" in early.text, early.text

    patched = call_answered(url, token, "apply_patch", DEMO_SCRIPT[1]["args"])
    assert not patched.is_error and "apply_patch ran" in patched.text, patched.text
    checked = call_answered(url, token, "run_check", {"check_id": "tests"})
    assert not checked.is_error and "run_check ran" in checked.text and "exit_code: 0" in checked.text, checked.text

    done = call_answered(url, token, "finish", {"summary": "negative quantities are refused"})
    assert not done.is_error and "completed" in done.text, done.text
    run = wait_for(run, ("complete", "stopped"), log=celery_worker.log)
    assert run.status == "complete", run.stop_message
    # Recorded as the loop records any proposal: five before finish, each through the gates.
    assert len(events(run, "proposed")) == 6
    assert [e.payload["gate"] for e in events(run, "invalid_input")] == ["validate"]
    # The ended run's token opens nothing, and the refusal is audited.
    after = post_initialize(url, token)
    assert after.status_code == 401 and "ended" in after.json()["error"]
    assert refusals(run)[-1]["reason"].startswith("the run has ended")


@pytest.mark.celery
@pytest.mark.docker
def test_it_waits_for_a_reviewer_tells_the_agent_to_call_again_and_performs_the_call_once(
    web: AsgiServer, celery_worker: Worker, operator: User, reviewer: User
) -> None:
    writes_need_a_reviewer()
    run, token = agent_run(operator)
    url = endpoint(web.url, run.pk)
    args = {"path": "orders/notes.txt", "content": "checked by an agent\n"}
    first = call(url, token, "write_file", args)
    # The client's wait ran out before the reviewer decided: told to call again, nothing performed.
    assert first.is_error and "Still waiting" in first.text and "same arguments" in first.text, first.text
    assert any("waiting for a reviewer's approval of call c1 (write_file)" in said for said in first.progress), first.progress
    assert events(run, "call_admitted") == []

    again = call_later(url, token, "write_file", args)
    request = ApprovalRequest.objects.get(run=run, status="pending")
    time.sleep(1)  # the second call is waiting on the same request
    grant(request, reviewer)
    answer: Answer = again.result(timeout=90)
    assert not answer.is_error and "write_file ran (call c1)" in answer.text, answer.text

    read = call_answered(url, token, "read_file", {"path": "orders/notes.txt"})
    assert "checked by an agent" in read.text
    # One request, one proposal, one approval, one execution.
    assert ApprovalRequest.objects.filter(run=run).count() == 1
    assert [e.payload["tool"] for e in events(run, "call_admitted")] == ["write_file", "read_file"]
    assert len(events(run, "proposed")) == 2
    assert Run.objects.get(pk=run.pk).status == "running"


@pytest.mark.celery
@pytest.mark.docker
def test_it_answers_a_denial_with_the_reviewers_reason_and_a_kill_with_who_killed(
    web: AsgiServer, celery_worker: Worker, operator: User, reviewer: User
) -> None:
    writes_need_a_reviewer()
    denied_run, denied_token = agent_run(operator)
    denied_call = call_later(endpoint(web.url, denied_run.pk), denied_token, "write_file", {"path": "orders/x.py", "content": "x\n"})
    # The request is filed before the checkpoint that makes the run wait for it: a decision between the two is refused as stale.
    wait_until(
        lambda: Run.objects.filter(pk=denied_run.pk, status=Run.Status.WAITING, approval_requests__status="pending").exists(),
        log=celery_worker.log,
    )
    deny(ApprovalRequest.objects.get(run=denied_run, status="pending"), reviewer, "not this file")
    answer = denied_call.result(timeout=60)
    assert answer.is_error and "not this file" in answer.text, answer.text
    denied_run = wait_for(denied_run, ("stopped",))
    assert denied_run.outcome == "denied"
    assert events(denied_run, "call_admitted") == [] and events(denied_run, "call_started") == []  # never reached the sandbox

    killed_run, killed_token = agent_run(operator)
    url = endpoint(web.url, killed_run.pk)
    waiting = call_later(url, killed_token, "write_file", {"path": "orders/y.py", "content": "y\n"})
    wait_until(lambda: ApprovalRequest.objects.filter(run=killed_run, status="pending").exists(), log=celery_worker.log)
    kill(killed_run, operator, reason="wrong task")
    answer = waiting.result(timeout=60)
    assert answer.is_error and "killed" in answer.text and "wrong task" in answer.text, answer.text
    killed_run = wait_for(killed_run, ("stopped",))
    assert killed_run.outcome == "killed"
    assert post_initialize(url, killed_token).status_code == 401

    # Killed while the run waits for the agent's next call (the worker holds the run).
    idle_run, idle_token = agent_run(operator)
    assert not call_answered(endpoint(web.url, idle_run.pk), idle_token, "list_files", {}).is_error
    clicked = time.monotonic()
    kill(idle_run, operator, reason="enough")
    idle_run = wait_for(idle_run, ("stopped",), timeout=30)
    assert time.monotonic() - clicked < 10
    assert idle_run.outcome == "killed" and "enough" in idle_run.stop_message and "next call" in idle_run.stop_message
