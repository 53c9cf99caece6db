"""A project's model budgets (runs.budgets): its runs started in a UTC day together stay
within its daily token budget; the run that would cross it stops ``budget_exhausted``,
naming the project's budget, with its report. Through a model server on loopback
speaking OpenAI's Chat Completions, every reply a tool call costing 120 tokens."""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.utils import timezone
from pytest_django import Settings

from core.scenarios import call
from projects.models import Project
from runs.approval_flow.gate import DjangoApprovals
from runs.models import Event, Report, Run
from runs.runtime import create_run
from runs.services import check_new_run, do_create_run, drive_run
from site_admin.projects import ProjectForm
from tests.fake_providers import API_KEY, FakeOpenAI, Reply, openai_tools
from tests.fixtures_services import Worker, purge_queue
from tests.helpers import CONTRACT, KillFlag, World
from tests.test_api import SMALL_CONTRACT

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.postgres]

READ = call("read_file", path="src/calc.py")
# Three proposals a run: each run uses 3 x 120 = 360 tokens, two use 720 of 800.
THREE_PROPOSALS = {**CONTRACT, "limits": {**CONTRACT["limits"], "max_proposals": 3}}  # type: ignore[dict-item]


def reads(body: dict[str, Any], number: int) -> Reply:
    return openai_tools((f"call_{number}", "read_file", {"path": "src/calc.py"}))


def model_run(world: World, base_url: str, actor: User) -> Run:
    new = check_new_run(THREE_PROPOSALS, {"kind": "openai", "model": "gpt-4o-mini", "base_url": base_url})
    return do_create_run(new, actor, lambda run: world.workspace.revision())


def drive(world: World, run: Run) -> str:
    return drive_run(run, world.environment(), DjangoApprovals(run), controls=KillFlag(str(run.pk))).outcome


def test_it_stops_the_run_that_would_cross_its_projects_daily_token_budget_with_its_report(settings: Settings, operator: User) -> None:
    Project.objects.filter(slug="default").update(daily_max_tokens=800)
    world = World()
    with FakeOpenAI(responder=reads) as fake:
        settings.OPENAI_API_KEY = API_KEY
        settings.OPENAI_ALLOWED_BASE_URLS = [fake.base_url]
        first, second, third = (model_run(world, fake.base_url, operator) for _ in range(3))
        assert drive(world, first) == "budget_exhausted" and "proposal budget of 3" in Run.objects.get(pk=first.pk).stop_message
        assert drive(world, second) == "budget_exhausted" and "proposal budget of 3" in Run.objects.get(pk=second.pk).stop_message
        before = len(fake.requests)
        assert drive(world, third) == "budget_exhausted"
    third.refresh_from_db()
    assert "token budget exhausted (what is left of project default's daily budget of 800 tokens)" in third.stop_message
    # 80 tokens were left: one request went out (the first has no size to judge by), none after.
    assert len(fake.requests) - before == 1
    report = Report.objects.get(run=third).data
    assert report["status"] == "budget_exhausted" and "token budget exhausted" in report["message"]
    used = [Run.objects.get(pk=r.pk).state["proposer_state"]["usage"] for r in (first, second, third)]
    assert [u["input_tokens"] + u["output_tokens"] for u in used] == [360, 360, 120]


def test_it_leaves_runs_of_another_project_and_of_another_day_alone(settings: Settings, operator: User, other_project: Project) -> None:
    Project.objects.filter(slug="default").update(daily_max_tokens=400)
    world = World()
    with FakeOpenAI(responder=reads) as fake:
        settings.OPENAI_API_KEY = API_KEY
        settings.OPENAI_ALLOWED_BASE_URLS = [fake.base_url]
        elsewhere = model_run(world, fake.base_url, operator)
        Run.objects.filter(pk=elsewhere.pk).update(project=other_project)
        elsewhere.refresh_from_db()
        yesterday, today = model_run(world, fake.base_url, operator), model_run(world, fake.base_url, operator)
        for run in (elsewhere, yesterday):
            assert drive(world, run) == "budget_exhausted" and "proposal budget of 3" in Run.objects.get(pk=run.pk).stop_message
        Run.objects.filter(pk=yesterday.pk).update(created_at=timezone.now() - timedelta(days=1))
        # Of today's 400 only this run's use counts: it too ends at its proposal limit.
        assert drive(world, today) == "budget_exhausted" and "proposal budget of 3" in Run.objects.get(pk=today.pk).stop_message


def in_reserve(body: dict[str, Any]) -> bool:
    return any("reserve kept for verification" in str(m.get("content")) for m in body["messages"])


def verifies_in_its_reserve(body: dict[str, Any], number: int) -> Reply:
    """Reads until told the budget is down to its reserve, then checks and tries to finish."""
    if not in_reserve(body):
        return reads(body, number)
    if not any("run_check" in str(m.get("tool_calls")) for m in body["messages"]):
        return openai_tools((f"call_{number}", "run_check", {"check_id": "tests"}))
    return openai_tools((f"call_{number}", "finish", {"summary": "read the code; the tests pass on it"}))


def test_it_keeps_the_projects_reserve_for_verification_and_the_report(settings: Settings, operator: User) -> None:
    # 1,000 tokens a day, 300 of them kept back: the model works with 700 (five replies
    # of 120 tokens), then has the reserve for the check and finish alone.
    Project.objects.filter(slug="default").update(daily_max_tokens=1000, reserve_tokens=300)
    world = World()
    with FakeOpenAI(responder=verifies_in_its_reserve) as fake:
        settings.OPENAI_API_KEY = API_KEY
        settings.OPENAI_ALLOWED_BASE_URLS = [fake.base_url]
        new = check_new_run(CONTRACT, {"kind": "openai", "model": "gpt-4o-mini", "base_url": fake.base_url})
        run = do_create_run(new, operator, lambda run: world.workspace.revision())
        # The check fails (the model fixed nothing), so finish is refused until the reserve too is used.
        assert drive(world, run) == "budget_exhausted"
    closing = [body for body in fake.bodies if in_reserve(body)]
    assert closing and all(sorted(t["function"]["name"] for t in body["tools"]) == ["finish", "run_check"] for body in closing)
    assert len(fake.bodies) - len(closing) == 5
    kinds = list(Event.objects.filter(run=run, type="model_note").values_list("payload__kind", flat=True))
    assert kinds.count("budget_reserve") == 1
    report = Report.objects.get(run=run).data
    assert not report["completed"] and "the reserve for verification and the report included" in report["message"]
    assert report["current_evidence"]["tests"]["passed"] is False, "the check ran in the reserve, on the final revision"
    usage = Run.objects.get(pk=run.pk).state["proposer_state"]["usage"]
    assert usage["input_tokens"] + usage["output_tokens"] <= 1000


def test_it_stops_a_model_that_does_other_work_in_the_reserve_naming_it(settings: Settings, operator: User) -> None:
    Project.objects.filter(slug="default").update(daily_max_tokens=1000, reserve_tokens=300)
    world = World()
    with FakeOpenAI(responder=reads) as fake:
        settings.OPENAI_API_KEY = API_KEY
        settings.OPENAI_ALLOWED_BASE_URLS = [fake.base_url]
        new = check_new_run(CONTRACT, {"kind": "openai", "model": "gpt-4o-mini", "base_url": fake.base_url})
        run = do_create_run(new, operator, lambda run: world.workspace.revision())
        assert drive(world, run) == "budget_exhausted"
    run.refresh_from_db()
    assert "used up but for its reserve, kept for verification and the report" in run.stop_message
    assert "the model proposed read_file" in run.stop_message
    assert Report.objects.get(run=run).data["status"] == "budget_exhausted"


def test_it_refuses_a_reserve_as_large_as_the_budget_it_is_kept_from() -> None:
    fields = {"slug": "p", "name": "P", "workspace_sources": "[]", "git_remotes": "[]", "run_limits": "{}", "reserve_cost_usd": 0}
    form = ProjectForm(data={**fields, "daily_max_tokens": 500, "reserve_tokens": 500})
    assert not form.is_valid() and "the reserve must be less than the daily max tokens (500)" in str(form.errors["reserve_tokens"])
    assert ProjectForm(data={**fields, "daily_max_tokens": 500, "reserve_tokens": 100}).is_valid()


# -- the race: runs of one project together, through a real worker ------------------

RACE_BUDGET = 200
# Each reply a read costing 20 tokens: a run alone could use its whole figure 10 times over.
PER_REPLY = (10, 10)
RACE_CONTRACT = {**SMALL_CONTRACT, "limits": {**SMALL_CONTRACT["limits"], "max_proposals": 30, "max_tool_calls": 30}}


def cheap_reads(body: dict[str, Any], number: int) -> Reply:
    return openai_tools((f"call_{number}", "read_file", {"path": "orders/total.py"}), usage=PER_REPLY)


@pytest.mark.celery
@pytest.mark.docker
def test_it_keeps_six_runs_started_together_within_their_projects_budget_plus_one_request_each(
    tmp_path_factory: pytest.TempPathFactory, settings: Settings, operator: User
) -> None:
    Project.objects.filter(slug="default").update(daily_max_tokens=RACE_BUDGET)
    purge_queue()
    with FakeOpenAI(responder=cheap_reads) as fake:
        settings.OPENAI_API_KEY = API_KEY
        settings.OPENAI_ALLOWED_BASE_URLS = [fake.base_url]
        worker = Worker(
            tmp_path_factory.mktemp("worker"),
            concurrency=2,
            env={"OPENAI_API_KEY": API_KEY, "HARNESS_OPENAI_ALLOWED_BASE_URLS": fake.base_url},
        )
        worker.start()
        try:
            model = {"kind": "openai", "model": "gpt-4o-mini", "base_url": fake.base_url}
            runs = [create_run({**RACE_CONTRACT, "task_id": f"race-{i}"}, model, operator, project="default") for i in range(6)]
            # Bounded by the runs' own wall time (RACE_CONTRACT), and a minute to be picked up.
            deadline = time.monotonic() + RACE_CONTRACT["limits"]["wall_time_seconds"] + 60
            while Run.objects.filter(pk__in=[r.pk for r in runs], status__in=("queued", "running")).exists():
                assert time.monotonic() < deadline, worker.log()[-4000:]
                time.sleep(0.2)
        finally:
            worker.stop()
            purge_queue()
    used = [Run.objects.get(pk=r.pk).state["proposer_state"].get("usage", {}) for r in runs]
    total = sum(u.get("input_tokens", 0) + u.get("output_tokens", 0) for u in used)
    per_request = sum(PER_REPLY)
    print(f"\nbudget race: 6 runs, {RACE_BUDGET}-token daily budget, {len(fake.requests)} requests, {total} tokens used")
    assert total <= RACE_BUDGET + 6 * per_request, f"{total} tokens used of a {RACE_BUDGET}-token budget"
    assert total >= RACE_BUDGET - per_request, "the runs stopped before the budget was used"
    for run in runs:
        run.refresh_from_db()
        assert run.outcome == "budget_exhausted", (run.task_id, run.outcome, run.stop_message)
