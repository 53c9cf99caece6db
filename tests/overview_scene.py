"""Runs for the overview's tests: one that waited for a reviewer and completed, one
whose publish was refused before its check, one denied a tool outside its
contract, a priced model request, and a run of another project."""

from __future__ import annotations

import time
from dataclasses import dataclass

from django.contrib.auth.models import User

from approvals.models import ApprovalRequest
from core import events as ev
from core.fences import RowLock
from core.scenarios import call
from projects.models import Project
from runs.approval_flow.flow import grant
from runs.approval_flow.gate import DjangoApprovals
from runs.models import Run
from runs.persistence.eventlog import append_event
from runs.services import drive_run
from tests.helpers import World


@dataclass
class Scene:
    waited: Run
    refused: Run
    denied: Run
    elsewhere: Run


def drive(world: World, run: Run) -> Run:
    drive_run(run, world.environment(), DjangoApprovals(run))
    run.refresh_from_db()
    return run


def usage(run: Run, model: str, cost: float) -> None:
    detail = {"kind": "usage", "provider": "openai", "model": model, "input_tokens": 1200, "output_tokens": 300, "cost_usd": cost}
    append_event(str(run.pk), ev.ModelNote, fence=RowLock("a test's model request"), kind="usage", detail=detail)


def overview_scene(operator: User, reviewer: User, elsewhere: Project) -> Scene:
    world = World()
    waited = drive(world, world.create(actor=operator))
    assert waited.status == "waiting_approval", waited.outcome
    time.sleep(1.1)
    grant(ApprovalRequest.objects.get(run=waited, status="pending"), reviewer)
    waited = drive(world, waited)
    assert waited.outcome == "complete", waited.outcome
    usage(waited, "gpt-test", 0.42)

    refused_world = World()
    refused = drive(refused_world, refused_world.create(actor=operator, script=[call("publish", message="too soon")]))
    assert refused.status == "stopped", refused.outcome

    denied_world = World()
    denied = drive(denied_world, denied_world.create(actor=operator, script=[call("search", pattern="x")]))
    assert denied.outcome == "tool_denied", denied.outcome

    other = World()
    elsewhere_run = drive(other, other.create(actor=operator, script=[call("search", pattern="y")], project_id=elsewhere.pk))
    usage(elsewhere_run, "gpt-elsewhere", 9.0)
    return Scene(waited, refused, denied, elsewhere_run)
