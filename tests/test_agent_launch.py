"""A run whose proposer is an agent CLI (runs.agents.launch): the real CLI (Claude Code,
Codex, Gemini CLI) in the real agent container, started by a real Celery worker, its
MCP calls and model calls through the gateway of a real Daphne server (the MCP
endpoint and the model proxy), the model proxy forwarding to a scripted model server
on 127.0.0.1 (the rig of tests/agents_support/rig.py). Every call the agent makes is a
proposal of the run, through the same gates, approvals and sandbox as a built-in one:
the demo task publishes once after a reviewer's grant; a denial never reaches the
sandbox; requested changes and refusals reach the model's next request; a kill ends
the container at once; the CLI's own shell and edit tools do nothing."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from django.contrib.auth.models import User

from approvals.models import ApprovalRequest, PolicyVersion
from approvals.policies import current_policy_row
from runs import placement
from runs.agent_runs import agent_of
from runs.approval_flow.flow import deny, grant, request_changes, save_policy_version
from runs.control import kill
from runs.models import AgentToken, Event, PublishedPatch, Run
from runs.persistence.artifacts import ArtifactStorage
from tests.agents_support.model_servers import Recorded, Text, Turn
from tests.agents_support.rig import (
    AGENT_MARKS,
    CLAUDE,
    CLIS,
    CODEX,
    RUN_SECONDS,
    SERVER_KEY,
    Cli,
    MakeRig,
    Rig,
    agent_containers,
    demo_script,
    events,
)
from tests.runs_waiting import DEMO_SCRIPT

pytestmark = list(AGENT_MARKS)


def up_to_publish(cli: Cli, message: str) -> list[Turn]:
    """Patch, run the tests check (publish needs it to pass), ask to publish."""
    return [
        cli.tool("apply_patch", DEMO_SCRIPT[1]["args"]),
        cli.tool("run_check", {"check_id": "tests"}),
        cli.tool("publish", {"message": message}),
    ]


def ended(run: Run, rig: Rig, timeout: float = RUN_SECONDS) -> Run:
    def done() -> bool:
        run.refresh_from_db()
        return run.status in (Run.Status.COMPLETE, Run.Status.STOPPED)

    rig.until(done, timeout)
    return run


def pending(run: Run) -> ApprovalRequest | None:
    """The run's pending request once the run waits for it (the request is filed before
    the checkpoint that makes the run wait: a decision between the two is refused as
    stale); fails at once if the run ended instead of asking."""
    if Run.objects.filter(pk=run.pk, status__in=(Run.Status.COMPLETE, Run.Status.STOPPED)).exists():
        said = list(Event.objects.filter(run=run).order_by("seq").values_list("type", flat=True))
        raise AssertionError(f"the run ended without asking: {Run.objects.get(pk=run.pk).stop_message}; events {said}")
    return ApprovalRequest.objects.filter(run=run, status="pending", run__status=Run.Status.WAITING).first()


def agent_ended(run: Run, rig: Rig) -> dict[str, Any]:
    rig.until(lambda: events(run, "agent_ended"), 60)
    [end] = events(run, "agent_ended")
    return end


def transcript(end: dict[str, Any]) -> str:
    return ArtifactStorage().get(end["artifacts"][0]).decode(errors="replace") if end["artifacts"] else ""


def after(rig: Rig, text: str) -> Recorded:
    """The first turn request whose body holds ``text`` (a tool's answer)."""
    for request in rig.model.turn_requests():
        if text in request.text():
            return request
    raise AssertionError(f"no model request holds {text!r}\n{rig.log()}")


@pytest.mark.parametrize("cli", CLIS, ids=[c.preset for c in CLIS])
def test_it_runs_the_demo_task_through_the_gates_and_publishes_once(cli: Cli, agent_rig: MakeRig, operator: User, reviewer: User) -> None:
    rig = agent_rig(demo_script(cli))
    started = time.monotonic()
    run = rig.start(cli, operator=operator)
    rig.until(lambda: pending(run))
    request = pending(run)
    assert request is not None and request.tool == "publish" and "orders/total.py" in request.diff
    # The agent waits for the reviewer in its own process, on the worker that holds the run.
    assert agent_containers(run), rig.log()
    grant(request, reviewer)
    run = ended(run, rig)
    assert run.status == "complete", (run.stop_message, rig.log())
    assert PublishedPatch.objects.filter(run_id=run.pk).count() == 1
    assert [e["tool"] for e in events(run, "call_admitted")] == ["read_file", "apply_patch", "run_check", "publish"]
    assert len(events(run, "proposed")) == len(DEMO_SCRIPT)  # finish included, each call once
    [start] = events(run, "agent_started")
    assert start["preset"] == cli.preset and start["version"] and start["image"].startswith("harness-agent:")
    end = agent_ended(run, rig)
    assert end["reason"] in ("exited", "killed") and len(end["artifacts"]) == 2
    assert transcript(end).strip(), "the transcript is stored"
    # The model's calls went through the proxy, on the run's record.
    notes = [e for e in events(run, "model_note") if e["kind"] == "usage"]
    assert len(notes) >= len(DEMO_SCRIPT), notes
    # The tool's answers reached the model: the file's text, the check's result.
    assert "def order_total" in after(rig, "def order_total").text()
    # The model server got the server's key, never the run's token.
    for seen in rig.model.turn_requests():
        assert SERVER_KEY in json.dumps(seen.headers) and "harness-run-" not in json.dumps(seen.headers) + seen.text()
    rig.until(lambda: agent_containers(run) == [], 60)
    print(f"{cli.preset}: demo completed in {time.monotonic() - started:.1f}s, {len(rig.model.turn_requests())} model turns")


@pytest.mark.parametrize("cli", CLIS, ids=[c.preset for c in CLIS])
def test_it_denied_publish_never_reaches_the_sandbox_and_the_agent_is_stopped(
    cli: Cli, agent_rig: MakeRig, operator: User, reviewer: User
) -> None:
    """A reviewer's denial stops the run (Approvals): the publish never reaches the
    sandbox, the waiting call is answered with the reviewer's reason, the agent and its
    container end, and its token opens nothing more."""
    rig = agent_rig([*up_to_publish(cli, "Publish nothing"), Text("FINAL: stopped")])
    run = rig.start(cli, operator=operator)
    rig.until(lambda: pending(run))
    request = pending(run)
    assert request is not None
    deny(request, reviewer, "not this publish-7f3a")
    run = ended(run, rig)
    assert run.outcome == "denied" and "publish-7f3a" in run.stop_message, run.stop_message
    # The publish never reached the sandbox: only the patch and the check did.
    assert [e["tool"] for e in events(run, "call_admitted")] == ["apply_patch", "run_check"]
    assert [e["tool"] for e in events(run, "call_started")] == ["apply_patch", "run_check"]
    assert PublishedPatch.objects.filter(run_id=run.pk).count() == 0
    end = agent_ended(run, rig)
    assert end["reason"] in ("killed", "exited"), end
    rig.until(lambda: agent_containers(run) == [], 30)
    assert not AgentToken.objects.filter(run=run, revoked_at__isnull=True).exists() or run.status == Run.Status.STOPPED


def test_it_refused_call_never_reaches_the_sandbox_and_the_refusal_reaches_the_model(agent_rig: MakeRig, operator: User) -> None:
    """A call the gates refuse (a write outside the contract's write paths) is not
    performed, and the refusal is the tool's answer in the model's next request."""
    cli = CLAUDE
    rig = agent_rig([cli.tool("write_file", {"path": "setup.cfg", "content": "[x]\n"}), Text("FINAL")])
    run = rig.start(cli, operator=operator)
    agent_ended(run, rig)
    run = ended(run, rig, 120)
    assert events(run, "call_admitted") == [] and events(run, "call_started") == []
    turns = rig.model.turn_requests()
    assert len(turns) >= 2, rig.log()
    answer = turns[1].text()
    assert "[harness]" in answer and "setup.cfg" in answer and '"is_error": true' in answer, answer[-3000:]
    assert not (placement.workspace_root(run) / "workspace" / "setup.cfg").exists()


@pytest.mark.parametrize("cli", CLIS, ids=[c.preset for c in CLIS])
def test_it_requested_changes_reach_the_model_and_the_agent_asks_again(
    cli: Cli, agent_rig: MakeRig, operator: User, reviewer: User
) -> None:
    script: list[Turn] = [
        *up_to_publish(cli, "first try"),
        cli.tool("publish", {"message": "Reject negative quantities"}),
        cli.tool("finish", {"summary": "published after the reviewer's changes"}),
        Text("FINAL"),
    ]
    rig = agent_rig(script)
    run = rig.start(cli, operator=operator)
    rig.until(lambda: pending(run))
    first = pending(run)
    assert first is not None
    request_changes(first, reviewer, "say what the commit does-91c2")
    rig.until(lambda: any("does-91c2" in r.text() for r in rig.model.turn_requests()))
    rig.until(lambda: (p := pending(run)) is not None and p.pk != first.pk)
    second = pending(run)
    assert second is not None
    grant(second, reviewer)
    run = ended(run, rig)
    assert run.status == "complete", (run.stop_message, rig.log())
    assert PublishedPatch.objects.filter(run_id=run.pk).count() == 1


@pytest.mark.parametrize("cli", CLIS, ids=[c.preset for c in CLIS])
def test_it_kill_ends_the_agent_container_at_once(cli: Cli, agent_rig: MakeRig, operator: User, reviewer: User) -> None:
    rig = agent_rig([*up_to_publish(cli, "x"), Text("FINAL")])
    run = rig.start(cli, operator=operator)
    rig.until(lambda: pending(run))
    assert agent_containers(run)
    clicked = time.monotonic()
    kill(run, operator, reason="enough-5e1d")
    rig.until(lambda: agent_containers(run) == [], 30)
    gone = time.monotonic() - clicked
    run = ended(run, rig, 60)
    assert run.outcome == "killed" and "enough-5e1d" in run.stop_message
    end = agent_ended(run, rig)
    assert end["reason"] == "killed" and end["exit_code"] is None
    print(f"kill: the agent container was gone {gone:.2f}s after the kill")


@pytest.mark.parametrize("cli", CLIS, ids=[c.preset for c in CLIS])
def test_it_builtin_shell_and_edit_tools_do_nothing_to_the_workspace(cli: Cli, agent_rig: MakeRig, operator: User) -> None:
    script: list[Turn] = [cli.shell, cli.edit, cli.tool("read_file", {"path": "orders/total.py"}), Text("FINAL")]
    rig = agent_rig(script)
    run = rig.start(cli, operator=operator)
    end = agent_ended(run, rig)
    run = ended(run, rig, 120)
    # Its problem first: pytest cuts a long dict short, and "failed" says little without it.
    assert end["reason"] == "exited", (end.get("problem"), end, transcript(end)[-2000:])
    assert "def order_total" in after(rig, "def order_total").text()
    text = (placement.workspace_root(run) / "workspace" / "orders" / "total.py").read_text()
    assert "hacked" not in text and "def order_total" in text
    assert not list((placement.workspace_root(run) / "workspace").rglob("probe*"))
    # The CLI told its model the tools are not there, and nothing of the run was changed.
    assert cli.refusal.format(tool=cli.shell.name) in rig.model.turn_requests()[1].text(), rig.model.turn_requests()[1].text()[-3000:]
    assert [e["tool"] for e in events(run, "call_admitted")] == ["read_file"]
    assert events(run, "workspace_changed") == []
    # The proposals ran out with the agent: the run ends as a model run that stops proposing.
    assert run.status in (Run.Status.COMPLETE, Run.Status.STOPPED)


@pytest.mark.parametrize("cli", CLIS, ids=[c.preset for c in CLIS])
def test_it_stale_request_makes_it_ask_again(cli: Cli, agent_rig: MakeRig, operator: User, reviewer: User) -> None:
    """A publish waits for a reviewer; a new policy version is saved meanwhile, so the
    request goes stale (a grant is bound to the call, the revision and the policy): the
    call goes back through the gates and a new request is asked for it, which the
    reviewer grants; the agent's one call is performed once."""
    script: list[Turn] = [*up_to_publish(cli, "Reject negative quantities"), cli.tool("finish", {"summary": "done"}), Text("FINAL")]
    rig = agent_rig(script)
    run = rig.start(cli, operator=operator)
    rig.until(lambda: pending(run))
    first = pending(run)
    assert first is not None
    row = current_policy_row(None)
    save_policy_version(PolicyVersion(note="a new version while the publish waits"), dict(row.document))
    rig.until(lambda: (p := pending(run)) is not None and p.pk != first.pk)
    second = pending(run)
    assert second is not None and second.policy_version > first.policy_version
    assert ApprovalRequest.objects.get(pk=first.pk).status == "stale"
    grant(second, reviewer)
    run = ended(run, rig)
    assert run.status == "complete", (run.stop_message, rig.log())
    assert PublishedPatch.objects.filter(run_id=run.pk).count() == 1
    # One call of the agent's (it waited throughout), asked for twice.
    publishes = [r for r in rig.model.turn_requests() if "Reject negative quantities" in r.text()]
    assert publishes, rig.log()


@pytest.mark.parametrize("cli", [CLAUDE, CODEX], ids=[CLAUDE.preset, CODEX.preset])
def test_it_agent_that_cannot_reach_the_mcp_endpoint_stops_the_run_saying_so(cli: Cli, agent_rig: MakeRig, operator: User) -> None:
    """Claude Code's transcript opens with its MCP servers' status; Codex, whose harness
    server is required, says on standard error that it could not start without it. An
    agent that could not connect to the run's endpoint (here the worker's gateway is no
    Harness but the scripted model server, which answers the MCP path 404) has none of
    Harness's tools: it is ended at once and the run stops saying why, not as an agent
    that chose to stop. (Gemini CLI reports nothing the launcher reads.)"""
    rig = agent_rig([cli.tool("read_file", {"path": "orders/total.py"}), Text("FINAL")], gateway="model")
    run = rig.start(cli, operator=operator)
    run = ended(run, rig, 120)
    assert run.status == Run.Status.STOPPED and run.outcome == "model_error", (run.outcome, run.stop_message, rig.log())
    named = "Claude Code" if cli is CLAUDE else "Codex"
    assert run.stop_message.startswith(f"the agent could not connect to Harness's MCP endpoint ({named} reported"), run.stop_message
    end = agent_ended(run, rig)
    assert end["reason"] == "failed" and end["problem"].startswith("could not connect to Harness's MCP endpoint"), end
    said = [ArtifactStorage().get(ref).decode(errors="replace") for ref in end["artifacts"]]
    report = '"name":"harness","status":"failed"' if cli is CLAUDE else "required MCP servers failed to initialize"
    assert any(report in text for text in said), [text[:2000] for text in said]
    # What the run page says of its agent (runs/_agent.html: "...; the agent <ended>").
    agent = agent_of(run)
    assert agent is not None and agent.ended == end["problem"], agent
    assert events(run, "proposed") == []
    rig.until(lambda: agent_containers(run) == [], 30)


def test_it_worker_killed_while_the_agent_waits_hands_the_run_over_and_publishes_once(
    agent_rig: MakeRig, operator: User, reviewer: User
) -> None:
    """The worker driving the run dies (SIGKILL, its agent's network with it) while the
    agent's publish waits for a reviewer. The grant wakes the run; another worker takes
    it over once the dead one's lease runs out, starts the agent again (it is told the
    run resumes), performs the granted publish once and finishes."""
    cli = CLAUDE
    rig = agent_rig([*up_to_publish(cli, "Reject negative quantities"), cli.tool("finish", {"summary": "published"}), Text("FINAL")])
    run = rig.start(cli, operator=operator)
    rig.until(lambda: pending(run))
    request = pending(run)
    assert request is not None and len(events(run, "agent_started")) == 1
    rig.worker.kill()
    grant(request, reviewer)
    rig.worker.start()
    run = ended(run, rig)
    assert run.status == "complete", (run.stop_message, rig.log())
    assert PublishedPatch.objects.filter(run_id=run.pk).count() == 1
    assert [e["tool"] for e in events(run, "call_started")].count("publish") == 1
    # The second worker started the agent again under its own lease.
    assert len(events(run, "agent_started")) == 2 and rig.worker.starts == 2, rig.log()
    rig.until(lambda: agent_containers(run) == [], 60)
