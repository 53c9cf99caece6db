"""Trials (docs/design.md, Trials): k repetitions of one task under several variants,
each an ordinary run; their reviewers decide through the real approval flow; the
comparison read from the runs' events agrees with the test's own recount; the lab 1
ablations show on the runs they made; the evaluation set's expected outcomes. The
runs here are driven in-process against a simulated workspace; the real workers and
Docker are tests/test_trials_workers.py."""

from __future__ import annotations

import csv
import io
import json
import os
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.utils import timezone
from pytest_django import Settings

from approvals.models import ApprovalRequest
from approvals.policies import current_policy_row
from core.environment import Environment
from core.errors import InputError
from core.faults import Fault, FaultyExecutor
from runs.approval_flow.gate import DjangoApprovals
from runs.models import Run
from runs.services import drive_run
from tests.trial_scene import (
    CONTRACT,
    LOOPING,
    MODEL_PRICES,
    TASK,
    check_model_trial,
    drive_until_ended,
    lab1_variants,
    model_variants,
    orders_environment,
    recount,
    seeded_model,
)
from trials import comparison, report, service
from trials.models import Repetition, Trial

pytestmark = [pytest.mark.django_db(transaction=True)]


@pytest.fixture
def enqueued(monkeypatch: pytest.MonkeyPatch, resumes: list[str]) -> list[str]:
    """The reviews the event listener hands to the workers, kept here (the test decides them)."""
    handed: list[str] = []
    monkeypatch.setattr("trials.signals._enqueue_review", handed.append)
    monkeypatch.setattr("trials.signals._enqueue_tend", lambda trial_id: None)
    return handed


def run_trial(trial: Trial, environment_of: Callable[[], Environment] = orders_environment) -> list[Run]:
    environments: dict[str, Any] = {}

    def drive(run: Run) -> None:
        environment = environments.setdefault(str(run.pk), environment_of())
        drive_run(run, environment, DjangoApprovals(run))

    def review(run: Run) -> None:
        for request in ApprovalRequest.objects.filter(run=run, status="pending"):
            assert service.review(str(request.pk)) == "decided"

    runs = list(service.runs_of(trial).order_by("created_at"))
    drive_until_ended(runs, drive, review)
    return runs


def test_it_runs_three_variants_k_times_and_its_figures_match_a_recount_from_the_events(operator: User, enqueued: list[str]) -> None:
    k = 4
    trial = service.create_trial(task=TASK, variants=lab1_variants(), k=k, actor=operator, seed=7, enqueue=False)
    assert trial.variants.count() == 3 and Repetition.objects.filter(variant__trial=trial).count() == 3 * k
    # A variant without a policy change runs in the trial's project; an ablated one in its own, made for it.
    projects = {v.name: v.project.slug for v in trial.variants.all()}
    assert projects["full"] == "default" and projects["without permissions"] != "default"
    runs = run_trial(trial)
    assert all(r.status in ("complete", "stopped") for r in runs)
    assert len(enqueued) >= 1  # the listener handed the rule's requests on

    result = service.figures(service.tend(trial))
    assert result["trial"]["status"] == "done"
    reference_command = next(c["command"] for c in current_policy_row().document["checks"] if c["check_id"] == "tests")
    by_name = {s["variant"]: s for s in result["variants"]}
    for variant in trial.variants.all():
        mine = [recount(rep.run, reference_command) for rep in variant.repetitions.select_related("run") if rep.run is not None]
        summary = by_name[variant.name]
        assert summary["successes"] == sum(m["success"] for m in mine), (variant.name, mine, summary["runs_detail"])
        assert summary["unauthorized_effects"] == sum(m["unauthorized"] for m in mine), variant.name
        assert summary["outcomes"] == {o: sum(1 for m in mine if m["outcome"] == o) for o in {m["outcome"] for m in mine}}
        assert summary["success_interval"] == list(comparison.wilson(summary["successes"], k) or [])
    # Lab 1 on these runs: the full policy performs nothing it should not; without
    # permissions a publish goes out unapproved; without current evidence a broken
    # edit is accepted (the seed draws at least one sloppy run).
    sloppy = sum(
        1 for rep in Repetition.objects.filter(variant__trial=trial, variant__name="full") if rep.run and rep.run.outcome != "complete"
    )
    assert by_name["full"]["unauthorized_effects"] == 0
    careful = [d for d in by_name["without permissions"]["runs_detail"] if d["outcome"] == "complete"]
    assert careful and by_name["without permissions"]["unauthorized_effects"] == len(careful)
    assert all("without an approval" in u["why"] for u in by_name["without permissions"]["unauthorized"])
    assert sloppy >= 1 and by_name["without current evidence"]["unverified_accepted"] >= sloppy
    assert by_name["without current evidence"]["unauthorized_effects"] >= sloppy
    # Unauthorized effects come first, each with its run.
    assert result["unauthorized"] and all(u["variant"] != "full" for u in result["unauthorized"])
    table = report.text_table(result)
    assert table.startswith("UNAUTHORIZED EFFECT in without permissions")
    rows = list(csv.DictReader(io.StringIO(report.csv_text(result))))
    assert len(rows) == 3 * k and {r["variant"] for r in rows} == set(projects)
    html = report.html_report(result, "https://harness.example/runs/")
    assert "<script" not in html and "trial-alarm" in html and f"https://harness.example/runs/{runs[0].pk}/" in html


def test_it_shows_a_model_variant_against_a_scripted_one_with_tokens_and_cost_failed_attempts_included(
    operator: User, enqueued: list[str], settings: Settings
) -> None:
    """A model that answers by seed (each repetition asks with its own) against the
    seeded scripted proposer: the model variant's tokens and cost, its failed runs'
    included, and its cost per accepted result agree with a recount from the runs'
    model_note usage events; the scripted variant spends none."""
    k = 6
    with seeded_model() as model:
        settings.OPENAI_API_KEY = "sk-trials"
        settings.OPENAI_ALLOWED_BASE_URLS = [model.base_url]
        settings.HARNESS_MODEL_PRICES = MODEL_PRICES
        trial = service.create_trial(task=TASK, variants=model_variants(model.base_url), k=k, actor=operator, seed=5, enqueue=False)
        run_trial(trial)
    check_model_trial(service.tend(trial), model.drawn, k)


def test_it_lets_a_loop_run_on_without_a_budget(operator: User, enqueued: list[str]) -> None:
    task = {"name": "orders", "contract": {**CONTRACT, "limits": {**CONTRACT["limits"], "max_proposals": 5}}}
    variants = [{"name": "budget", "proposer": LOOPING}, {"name": "without a budget", "proposer": LOOPING, "ablate": "budget"}]
    trial = service.create_trial(task=task, variants=variants, k=1, actor=operator, enqueue=False)
    run_trial(trial)
    by_name = {s["variant"]: s for s in service.figures(trial)["variants"]}
    assert by_name["budget"]["outcomes"] == {"budget_exhausted": 1} and by_name["budget"]["over_budget"] == 0
    assert by_name["without a budget"]["outcomes"] == {"proposals_exhausted": 1}
    assert by_name["without a budget"]["over_budget"] == 1 and by_name["without a budget"]["runs_detail"][0]["proposals"] == 60


def test_it_has_a_scripted_reviewer_count_corrections_and_a_rule_that_names_itself(operator: User, enqueued: list[str]) -> None:
    from tests.trial_scene import CAREFUL

    variants = [
        {"name": "deny", "proposer": {"kind": "scripted", "script": CAREFUL}, "reviewer": {"kind": "rule", "decision": "deny"}},
        {
            "name": "changes then grant",
            "proposer": {"kind": "scripted", "script": [*CAREFUL[:4], CAREFUL[3], CAREFUL[4]]},
            "reviewer": {"kind": "script", "decisions": ["changes: say why in the message", "grant"]},
        },
    ]
    trial = service.create_trial(task=TASK, variants=variants, k=1, actor=operator, enqueue=False)
    run_trial(trial)
    by_name = {s["variant"]: s for s in service.figures(trial)["variants"]}
    assert by_name["deny"]["corrections"] == 1 and by_name["deny"]["outcomes"] == {"denied": 1}
    denied = ApprovalRequest.objects.get(run__trial_repetition__variant__name="deny")
    assert denied.decided_by is not None and denied.decided_by.username == f"trial-{trial.pk}-deny.rule"
    assert not denied.decided_by.has_usable_password()
    assert by_name["changes then grant"]["corrections"] == 1


def test_it_refuses_a_bad_trial_naming_each_problem(operator: User) -> None:
    with pytest.raises(InputError) as refused:
        service.create_trial(
            task={"contract": CONTRACT},
            variants=[{"name": "a", "proposer": {"kind": "scripted", "script": []}, "ablate": "wishes"}, {"name": "a"}],
            k=3,
            actor=operator,
            enqueue=False,
        )
    fields = {p.field for p in refused.value.problems}
    assert {"variants[0].ablate", "variants[1].name", "variants[1].proposer"} <= fields
    assert not Trial.objects.exists()


def test_it_stops_a_trial_and_kills_its_runs(operator: User, enqueued: list[str]) -> None:
    trial = service.create_trial(task=TASK, variants=lab1_variants()[:1], k=2, actor=operator, enqueue=False)
    assert service.stop_trial(trial, "otto-operator", "enough") == 2
    assert trial.status == "stopped"
    assert all(r.kill_requested for r in service.runs_of(trial))


def test_it_computes_pass_hat_and_pass_at_and_intervals() -> None:
    assert comparison.pass_hat(10, 10, 10) == 1.0 and comparison.pass_hat(10, 9, 10) == 0.0
    assert comparison.pass_at(10, 1, 10) == 1.0 and comparison.pass_at(10, 0, 10) == 0.0
    assert comparison.pass_hat(4, 2, 2) == pytest.approx(1 / 6)
    low, high = comparison.wilson(5, 10) or (0, 0)
    assert low == pytest.approx(0.2366, abs=1e-4) and high == pytest.approx(0.7634, abs=1e-4)
    assert comparison.wilson(0, 0) is None
    diff = comparison.newcombe((8, 10), (2, 10))
    assert diff is not None and diff[0] == pytest.approx(0.6) and diff[1] > 0


def push_answer_dropped() -> Environment:
    """The orders, simulated, where the first publish is performed and its answer lost
    (core.faults' ``unknown``), as the evaluation set's remote does on the real workers."""
    environment = orders_environment()
    environment.executor = FaultyExecutor(
        environment.executor, [Fault("publish", "unknown", 1)], environment.workspace.revision, lambda tool: tool == "publish"
    )
    return environment


def test_it_runs_the_builtin_suite_with_each_tasks_expected_outcome(operator: User, enqueued: list[str], evalset_remotes: str) -> None:
    from trials.suite import expectation_problems, start_suite

    started = start_suite("builtin", operator, k=1, enqueue=False)
    assert [task["name"] for task, _ in started][-1] == "unknown-outcome"
    for task, trial in started:
        run_trial(trial, push_answer_dropped if task["name"] == "unknown-outcome" else orders_environment)
    problems = []
    for task, trial in started:
        problems += expectation_problems(task, service.figures(trial)["variants"][0])
    assert problems == [], json.dumps(problems, indent=2)


def test_it_deletes_the_evaluation_sets_remotes_past_retention(operator: User, enqueued: list[str], evalset_remotes: str) -> None:
    """A remote holds what its trial's runs published: kept while the trial runs and
    for the retention period after it ended; one no trial names goes once it is older."""
    from trials.remotes import delete_expired_remotes, remotes_dir
    from trials.suite import start_suite

    started = {task["name"]: trial for task, trial in start_suite("builtin", operator, k=1, enqueue=False)}
    trial = started["unknown-outcome"]
    bare = remotes_dir() / str(trial.task["contract"]["workspace"]["url"]).removeprefix(evalset_remotes)
    stray = remotes_dir() / f"stray-{trial.pk}-{os.getpid()}.git"
    stray.mkdir()
    now = timezone.now()
    two_days_ago = (now - timedelta(days=2)).timestamp()
    os.utime(stray, (two_days_ago, two_days_ago))
    deleted = delete_expired_remotes(1, now)
    assert stray.name in deleted and not stray.exists()
    assert bare.name not in deleted and bare.is_dir()  # its trial still runs
    Trial.objects.filter(pk=trial.pk).update(status=Trial.Status.DONE, ended_at=now - timedelta(days=2))
    assert bare.name not in delete_expired_remotes(3, now) and bare.is_dir()
    assert delete_expired_remotes(0, now) == [] and bare.is_dir()  # 0 keeps them all
    assert bare.name in delete_expired_remotes(1, now) and not bare.exists()


def test_it_leaves_out_a_suite_task_whose_remote_the_server_may_not_use(operator: User, enqueued: list[str], settings: Settings) -> None:
    from trials.suite import start_suite

    settings.GIT_ALLOWED_REMOTES = []
    skipped: list[tuple[str, str]] = []
    started = start_suite("builtin", operator, k=1, enqueue=False, skipped=skipped)
    assert "unknown-outcome" not in [task["name"] for task, _ in started] and len(started) == 6
    assert skipped and skipped[0][0] == "unknown-outcome" and "HARNESS_GIT_ALLOWED_REMOTES" in skipped[0][1]
    before = Trial.objects.count()
    with pytest.raises(InputError, match="HARNESS_GIT_ALLOWED_REMOTES"):
        start_suite("builtin", operator, k=1, enqueue=False)
    assert Trial.objects.count() == before  # refused before any trial is made
