"""What a run of a project may ask for (``Project.run_limits``): its limits are the
contract's within the policy's budget and its project's bounds, the run's start says
which were cut, and a bound that is no limit is refused where it is entered."""

from __future__ import annotations

import pytest

from projects.models import Project
from runs.approval_flow.gate import DjangoApprovals
from runs.models import Event
from runs.services import drive_run
from site_admin.projects import ProjectForm
from tests.helpers import KillFlag, World

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.postgres]


def test_it_bounds_a_runs_limits_by_its_project_and_says_so_when_it_starts() -> None:
    Project.objects.filter(slug="default").update(run_limits={"max_proposals": 2, "wall_time_seconds": 60})
    world = World()
    run = world.create()
    state = drive_run(run, world.environment(), DjangoApprovals(run), controls=KillFlag(str(run.pk)))
    assert (state.limits.max_proposals, state.limits.wall_time_seconds, state.limits.max_tool_calls) == (2, 60, 20)
    assert state.outcome == "budget_exhausted" and state.proposals == 2
    started = Event.objects.get(run=run, type="run_started").payload
    assert started["clipped"]["max_proposals"] == {"asked": 20, "allowed": 2}
    assert started["clipped"]["wall_time_seconds"] == {"asked": 600, "allowed": 60}


@pytest.mark.parametrize(
    ("limits", "said"),
    [
        ('{"max_turns": 3}', "'max_turns' is not a limit"),
        ('{"max_proposals": 0}', "max_proposals must be a whole number of at least 1, got 0"),
        ("[2]", "an object of limits"),
    ],
)
def test_it_refuses_a_bound_that_is_no_limit(limits: str, said: str) -> None:
    form = ProjectForm(
        data={
            "slug": "p",
            "name": "P",
            "workspace_sources": "[]",
            "git_remotes": "[]",
            "run_limits": limits,
            "reserve_tokens": 0,
            "reserve_cost_usd": 0,
        }
    )
    assert not form.is_valid() and said in " ".join(str(e) for e in form.errors["run_limits"])
