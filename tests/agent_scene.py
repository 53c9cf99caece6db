"""An outside agent's run for the pages' tests (issue 41), driven through the real
store and gates: its proposer is the agent's (the run's configuration says
``{"kind": "agent", "preset": "codex"}``), played here by a script that notes each
call as the agent's proposer does (a ``model_note`` of kind ``agent_call`` before its
``proposed``); its agent's start and end are the events the launcher writes, and its
model calls the model proxy's own notes (runs.agents.usage.record)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

from django.contrib.auth.models import User

from approvals.models import ApprovalRequest
from core import events as ev
from core.feedback import Feedback
from core.fences import RowLock
from core.jsonutil import JSON
from core.scripted import ScriptedProposer
from runs.agents import usage
from runs.approval_flow.flow import grant
from runs.approval_flow.gate import DjangoApprovals
from runs.models import Run
from runs.persistence.eventlog import append_event
from runs.services import drive_run
from tests.helpers import SCRIPT, World

PRICES = {"gpt-test": {"input": 1.25, "output": 10.0}}
AGENT = {"kind": "agent", "preset": "codex", "model": "gpt-test"}
FENCE = RowLock("a test's agent launcher")


class AgentsCalls(ScriptedProposer):
    """A script standing for the agent: each proposal noted as the agent's call."""

    def __init__(self, preset: str, script: Sequence[object], position: int = 0) -> None:
        super().__init__(script, position)
        self.preset = preset
        self._notes: list[dict[str, JSON]] = []

    def propose(self, feedback: Feedback | None) -> object | None:
        proposal = super().propose(feedback)
        if proposal is not None:
            self._notes.append({"kind": "agent_call", "agent": self.preset, "request": f"r{self.position}"})
        return proposal

    def notes(self) -> list[dict[str, JSON]]:
        notes, self._notes = self._notes, []
        return notes


@dataclass
class AgentScene:
    world: World
    run: Run
    request: ApprovalRequest


def model_call(run: Run, input_tokens: int = 1200, output_tokens: int = 300) -> None:
    call = usage.ModelCall(
        provider="openai",
        api="responses",
        model="gpt-test",
        status=200,
        duration_ms=800,
        stream=True,
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        agent="codex_exec/0.171.0",
    )
    usage.record(run.pk, call)


def drive(world: World, run: Run, preset: str) -> Run:
    position = run.state.get("proposer_state", {}).get("position", 0) if isinstance(run.state, dict) else 0
    drive_run(run, world.environment(), DjangoApprovals(run), proposer=AgentsCalls(preset, SCRIPT, int(position or 0)))
    run.refresh_from_db()
    return run


def agent_waiting(starter: User, preset: str = "codex", version: str = "0.171.0", image: str = "harness-agent:codex-0f3a") -> AgentScene:
    """An agent's run waiting for a reviewer's approval of its publish, after two model
    calls through the proxy and one the proxy refused (a model the run did not choose)."""
    world = World()
    run = world.create(actor=starter)
    Run.objects.filter(pk=run.pk).update(proposer={**AGENT, "preset": preset})
    run.refresh_from_db()
    append_event(str(run.pk), ev.AgentStarted, fence=FENCE, preset=preset, version=version, image=image)
    model_call(run)
    run = drive(world, run, preset)
    assert run.status == "waiting_approval", run.outcome
    model_call(run, 800, 200)
    usage.refusal(run.pk, "refused", "the run did not choose the model gpt-other", {"model": "gpt-other"})
    return AgentScene(world, run, ApprovalRequest.objects.get(run=run, status="pending"))


def agent_completed(starter: User, reviewer: User, preset: str = "codex") -> AgentScene:
    """The same run, its publish granted, completed; its agent exited 0."""
    scene = agent_waiting(starter, preset)
    time.sleep(1.1)  # a reviewer's decision after the request was filed, as in life
    grant(scene.request, reviewer)
    run = drive(scene.world, scene.run, preset)
    assert run.outcome == "complete", run.outcome
    append_event(str(run.pk), ev.AgentEnded, fence=FENCE, preset=preset, exit_code=0, reason="exited", duration_ms=42_000)
    scene.request.refresh_from_db()
    return AgentScene(scene.world, run, scene.request)
