"""Every way a run can end, told the same everywhere (DESIGN 15, core.outcome): for each
stop reason a run driven through the real store reaches, the run page, the result
page, the API, the stored report and the notification (webhook and Slack text) each
say the same outcome in the same words, and none calls a run complete whose reviewer's
requested changes were not taken up or whose publish was refused. (Mail carries no
run's end: it tells reviewers of requests only.)"""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse
from django.utils.text import capfirst

from core.outcome import STOP_REASONS, WORDS, Outcome
from core.scenarios import call
from notifications.messages import notice, summary
from pages.templatetags.harness import visible
from runs.approval_flow.flow import deny, grant, request_changes
from runs.approval_flow.gate import DjangoApprovals
from runs.control import kill
from runs.models import Event, Run
from runs.outcome import told
from runs.runtime import stop_undriven
from runs.scheduling import leases
from runs.services import drive_run, report_of
from tests.fixtures_web import Scene, waiting_scene
from tests.helpers import CONTRACT, KillFlag, World

READ = call("read_file", path="src/calc.py")


def drive(scene: Scene) -> Run:
    run = Run.objects.get(pk=scene.run.pk)
    drive_run(run, scene.world.environment(), DjangoApprovals(run), controls=KillFlag(str(run.pk)))
    run.refresh_from_db()
    return run


def ended(script: list[Any], contract: dict[str, Any] | None = None) -> Run:
    """A run that ends without asking anyone."""
    world = World()
    run = world.create(script=script, contract=contract or CONTRACT)
    drive_run(run, world.environment(), DjangoApprovals(run), controls=KillFlag(str(run.pk)))
    run.refresh_from_db()
    return run


def limited(**limits: int) -> dict[str, Any]:
    base = CONTRACT["limits"]
    assert isinstance(base, dict)
    return {**CONTRACT, "limits": {**base, **limits}}


# Each way to end: the outcome's machine name, how a run gets there.
def _ending(code: str, operator: User, reviewer: User) -> Run:
    if code in ("complete", "unpublished", "denied", "killed"):
        scene = waiting_scene(operator)
        if code == "complete":
            grant(scene.request, reviewer)
        elif code == "unpublished":
            request_changes(scene.request, reviewer, "Name ORD-12 in the message.")
        elif code == "denied":
            deny(scene.request, reviewer, "not this week")
        else:
            kill(scene.run, operator, "wrong repository")
        return drive(scene)
    if code == "proposals_exhausted":
        return ended([READ])
    # The proposal budget and the call budget end alike: budget_exhausted.
    return ended([READ, READ, READ], limited(max_tool_calls=1))


ENDINGS = ["complete", "unpublished", "denied", "killed", "proposals_exhausted", "budget_exhausted"]


def test_it_has_words_for_every_ending_walked_here() -> None:
    assert set(ENDINGS) <= set(WORDS) and all("_" not in WORDS[code] for code in ENDINGS)


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("code", list(ENDINGS))
def test_it_tells_each_ending_the_same_on_every_surface(code: str, operator: User, reviewer: User) -> None:
    told_everywhere(_ending(code, operator, reviewer), code, operator)


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("code", list(STOP_REASONS))
def test_it_tells_every_stop_reason_the_same_on_every_surface(code: str, operator: User) -> None:
    """Every reason the core and the worker stop a run for, recorded as the worker
    records a stop it reaches outside the loop (runs.runtime.stop_undriven)."""
    run = World().create()
    token = leases.acquire(str(run.pk), "test")
    assert token is not None
    stop_undriven(run, code, f"what stopped it: {code}", token)
    leases.release(str(run.pk), token)
    run.refresh_from_db()
    outcome = told_everywhere(run, code, operator)
    assert outcome.sentence == f"stopped: {WORDS[code]} (what stopped it: {code})"


def told_everywhere(run: Run, code: str, viewer: User) -> Outcome:
    """The run page, result page, API, stored report and notification text say
    ``code``'s outcome in the same words; anything but complete names its limitations."""
    outcome = told(run)
    assert outcome.code == code, outcome
    said = outcome.sentence
    client = Client()
    client.force_login(viewer)
    run_page = client.get(reverse("runs:detail", args=[run.pk])).content.decode()
    assert f'data-field="said">{visible(said)}</p>' in run_page
    result = client.get(reverse("runs:result", args=[run.pk])).content.decode()
    assert f">{visible(capfirst(said))}.</p>" in result and f">{outcome.label}</span>" in result
    api = client.get(f"/api/runs/{run.pk}/").json()
    assert (api["outcome"], api["said"]) == (code, said)
    report = report_of(run)
    assert report["outcome"]["code"] == code and report["outcome"]["sentence"] == said
    assert [lim["text"] for lim in report["outcome"]["limitations"]] == [lim.text for lim in outcome.limitations]
    stopped = Event.objects.filter(run=run, type="stopped").latest("seq")
    body = notice(
        delivery_id="d",
        kind="run_finished",
        run={"id": str(run.pk), "task_id": run.task_id, "objective": ""},
        event=stopped.as_dict(),
        base_url="http://h",
    )
    assert body["stop"]["outcome"] == code and body["stop"]["said"] == said and said in summary(body)
    if code != "complete":
        # Not a plain success anywhere, and its limitations name why in words.
        assert api["outcome"] != "complete" and f">{WORDS['complete']}</span>" not in result
        assert outcome.limitations and all("_" not in lim.text.split("(")[0] for lim in outcome.limitations)
        assert 'id="result-limitations"' in result and '<li class="faint">none</li>' not in result.split('id="result-limitations"')[1][:400]
    if code == "unpublished":
        assert "requested changes were not taken up" in result and "nothing was published" in result.lower()
    return outcome
