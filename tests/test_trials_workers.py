"""Trials on the real workers and Docker (docs/design.md, Trials): three lab 1
variants x k on the orders example with the seeded stochastic proposer, each
repetition an ordinary run driven by a Celery worker in the sandbox, the rule
reviewer deciding through the workers' own task; the figures recounted from the
runs' events; and the builtin evaluation set's expected outcomes on real runs."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator

import docker
import pytest
from django.contrib.auth.models import User
from pytest_django import Settings

from approvals.policies import current_policy_row
from tests.fixtures_services import Worker, purge_queue
from tests.seeded_model_server import SeededModel
from tests.trial_scene import MODEL_PRICES, TASK, check_model_trial, lab1_variants, model_variants, recount, seeded_model
from trials import service
from trials.models import Trial
from trials.remotes import answer_dropped
from trials.suite import expectation_problems, start_suite

pytestmark = [pytest.mark.celery, pytest.mark.docker]


def wait_done(trials: list[Trial], worker: Worker, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while any(service.tend(t).status == Trial.Status.RUNNING for t in trials):
        assert time.monotonic() < deadline, [service.progress(t) for t in trials] + [worker.log()[-3000:]]
        time.sleep(0.5)


def lab1_on_real_runs(k: int, operator: User, worker: Worker) -> None:
    trial = service.create_trial(task=TASK, variants=lab1_variants(), k=k, actor=operator, seed=11)
    wait_done([trial], worker, timeout=150 * k)
    result = service.figures(trial)
    reference_command = next(c["command"] for c in current_policy_row().document["checks"] if c["check_id"] == "tests")
    by_name = {s["variant"]: s for s in result["variants"]}
    for variant in trial.variants.all():
        mine = [recount(rep.run, reference_command) for rep in variant.repetitions.select_related("run") if rep.run is not None]
        summary = by_name[variant.name]
        assert summary["ended"] == k
        assert summary["successes"] == sum(m["success"] for m in mine), (variant.name, mine, summary["runs_detail"])
        assert summary["unauthorized_effects"] == sum(m["unauthorized"] for m in mine), (variant.name, mine)
        assert summary["corrections"] == sum(m["corrections"] for m in mine)
    assert by_name["full"]["unauthorized_effects"] == 0
    completed = [d for d in by_name["without permissions"]["runs_detail"] if d["outcome"] == "complete"]
    assert completed and by_name["without permissions"]["unauthorized_effects"] == len(completed)
    sloppy = [d for d in by_name["without current evidence"]["runs_detail"] if "checks did not pass" in " ".join(d["why"])]
    assert by_name["without current evidence"]["unverified_accepted"] == len(sloppy)
    print(service.figures(trial)["variants"][0]["working_seconds"])


def test_it_runs_the_lab_1_variants_on_real_workers_and_recounts_them(
    celery_worker: Worker, docker_engine: docker.DockerClient, operator: User
) -> None:
    lab1_on_real_runs(3, operator, celery_worker)


# The issue's own figure: 3 variants x k=10 on real workers, Docker and PostgreSQL.
@pytest.mark.slow
@pytest.mark.postgres_only
def test_it_runs_the_lab_1_variants_ten_times_each(celery_worker: Worker, docker_engine: docker.DockerClient, operator: User) -> None:
    lab1_on_real_runs(10, operator, celery_worker)


@pytest.fixture
def model_worker(transactional_db: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[SeededModel, Worker]]:
    """The seeded model on 127.0.0.1 and a worker whose server configuration allows it."""
    purge_queue()
    with seeded_model() as model:
        env = {
            "OPENAI_API_KEY": "sk-trials",
            "HARNESS_OPENAI_ALLOWED_BASE_URLS": model.base_url,
            "HARNESS_MODEL_PRICES": json.dumps(MODEL_PRICES),
        }
        worker = Worker(tmp_path_factory.mktemp("worker"), env=env)
        worker.start()
        try:
            yield model, worker
        finally:
            worker.stop()
            purge_queue()


def test_it_runs_a_model_variant_against_a_scripted_one_on_real_workers_with_its_tokens_and_cost(
    model_worker: tuple[SeededModel, Worker], docker_engine: docker.DockerClient, operator: User, settings: Settings
) -> None:
    model, worker = model_worker
    settings.OPENAI_API_KEY = "sk-trials"
    settings.OPENAI_ALLOWED_BASE_URLS = [model.base_url]
    settings.HARNESS_MODEL_PRICES = MODEL_PRICES
    k = 4
    trial = service.create_trial(task=TASK, variants=model_variants(model.base_url), k=k, actor=operator, seed=5)
    wait_done([trial], worker, timeout=150 * k)
    check_model_trial(trial, model.drawn, k)


@pytest.fixture
def suite_worker(evalset_remotes: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Worker]:
    """A worker that may use the evaluation set's remotes (trials.remotes), as the test may."""
    purge_queue()
    worker = Worker(tmp_path_factory.mktemp("worker"), env={"HARNESS_GIT_ALLOWED_REMOTES": evalset_remotes})
    worker.start()
    try:
        yield worker
    finally:
        worker.stop()
        purge_queue()


def test_it_meets_every_expected_outcome_of_the_builtin_suite_on_real_runs(
    suite_worker: Worker, docker_engine: docker.DockerClient, operator: User
) -> None:
    started = start_suite("builtin", operator, k=1)
    assert len(started) == 7
    wait_done([t for _, t in started], suite_worker, timeout=900)
    problems = [p for task, trial in started for p in expectation_problems(task, service.figures(trial)["variants"][0])]
    assert problems == []
    # The unknown outcome: the remote took the push and dropped its answer; the run
    # found its branch there and pushed nothing again: one commit on the remote's main.
    trial = next(trial for task, trial in started if task["name"] == "unknown-outcome")
    url = trial.task["contract"]["workspace"]["url"]
    assert answer_dropped(url)
    bare = url.removeprefix("file://")
    branches = subprocess.run(
        ["git", "--git-dir", bare, "for-each-ref", "--format=%(refname)", "refs/heads/harness/"], capture_output=True, text=True, check=True
    ).stdout.split()
    assert len(branches) == 1, branches
    log = subprocess.run(["git", "--git-dir", bare, "rev-list", "main.." + branches[0]], capture_output=True, text=True, check=True)
    assert len(log.stdout.split()) == 1
