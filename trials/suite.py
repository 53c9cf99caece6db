"""The evaluation set that ships with Harness (examples/evalset/suite.json): one
trial per task, its scripted variant run k times against the policy in force in the
project, and each task's expected outcome checked against the comparison."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from django.conf import settings

from approvals.policies import current_policy_row
from core.errors import FieldProblem, InputError
from projects.access import check_start_project
from trials.models import Trial
from trials.remotes import RemoteNotAllowed, make_remote
from trials.service import create_trial, figures

SUITES = {"builtin": Path(settings.BASE_DIR) / "examples" / "evalset" / "suite.json"}


def load_suite(name: str) -> dict[str, Any]:
    path = SUITES.get(name) or Path(name)
    suite: dict[str, Any] = json.loads(path.read_text())
    return suite


def task_of(task: dict[str, Any]) -> dict[str, Any]:
    """The trial's task: a task with a ``remote`` clones and publishes to a git remote
    made for it now (trials.remotes); RemoteNotAllowed when the server may not use it."""
    contract = task["task"]["contract"]
    if "remote" in task:
        url = make_remote(task["name"], task["remote"])
        contract = {**contract, "workspace": {"kind": "git", "url": url, "ref": "main"}}
    return {**task["task"], "contract": contract, "name": task["name"]}


def start_suite(
    name: str,
    actor: Any,
    *,
    k: int = 1,
    project: str | None = None,
    seed: int = 0,
    enqueue: bool = True,
    skipped: list[tuple[str, str]] | None = None,
) -> list[tuple[dict[str, Any], Trial]]:
    """One trial per task of the suite. A task this server cannot run (its git remote
    is not allowed here) is left out, named with why in ``skipped`` when given, else
    refused."""
    suite = load_suite(name)
    place = check_start_project(actor, project)
    runnable = []
    for task in suite["tasks"]:
        try:
            runnable.append((task, task_of(task)))
        except RemoteNotAllowed as exc:
            if skipped is None:
                raise InputError("suite", [FieldProblem(f"tasks.{task['name']}.remote", str(exc))]) from None
            skipped.append((task["name"], str(exc)))
    started = []
    for task, trial_task in runnable:
        variant = {key: value for key, value in task["variant"].items() if key != "own_project"}
        variant["name"] = task["name"]
        if task["variant"].get("own_project"):
            # Its reviewer saves the policy: in a project of its own, so no other run sees the save.
            variant["policy"] = {k_: v for k_, v in current_policy_row(place.pk).document.items() if k_ != "version"}
        trial = create_trial(
            task=trial_task,
            variants=[variant],
            k=k,
            actor=actor,
            project=place.slug,
            name=f"{suite.get('name', name)}: {task['name']}",
            seed=seed,
            suite=str(suite.get("name", name)),
            enqueue=enqueue,
        )
        started.append((task, trial))
    return started


def expectation_problems(task: dict[str, Any], summary: dict[str, Any]) -> list[str]:
    """How the variant's runs differ from the task's expected outcome (each run)."""
    expected = task.get("expected", {})
    problems = []
    for run in summary["runs_detail"]:
        where = f"{task['name']} run {run['run_id']}"
        if "outcome" in expected and run["outcome"] != expected["outcome"]:
            problems.append(f"{where}: outcome {run['outcome']}, expected {expected['outcome']}")
        if "success" in expected and run["success"] != expected["success"]:
            problems.append(f"{where}: success {run['success']}, expected {expected['success']} ({'; '.join(run['why']) or 'no reason'})")
        if "unauthorized_effects" in expected and len(run["unauthorized"]) != expected["unauthorized_effects"]:
            problems.append(f"{where}: {len(run['unauthorized'])} unauthorized effects, expected {expected['unauthorized_effects']}")
        if run["unsafe_attempts"] < expected.get("unsafe_attempts_at_least", 0):
            problems.append(f"{where}: {run['unsafe_attempts']} unsafe attempts, expected at least {expected['unsafe_attempts_at_least']}")
        if "proposals" in expected and run["proposals"] != expected["proposals"]:
            problems.append(f"{where}: {run['proposals']} proposals, expected {expected['proposals']}")
        for figure in ("stale_requests", "unknown_outcomes", "reconciled_applied", "repeated_effects"):
            if figure in expected and run[figure] != expected[figure]:
                problems.append(f"{where}: {run[figure]} {figure.replace('_', ' ')}, expected {expected[figure]}")
    return problems


def suite_rows(started: list[tuple[dict[str, Any], Trial]]) -> list[dict[str, Any]]:
    rows = []
    for task, trial in started:
        summary = figures(trial)["variants"][0]
        rows.append(
            {
                "task": task["name"],
                "trial": trial.pk,
                "expected": task.get("expected", {}).get("outcome", ""),
                "outcomes": summary["outcomes"],
                "successes": summary["successes"],
                "runs": summary["ended"],
                "unsafe_attempts": summary["unsafe_attempts"],
                "unauthorized_effects": summary["unauthorized_effects"],
                "problems": expectation_problems(task, summary),
            }
        )
    return rows
