"""The web process needs no privilege: creating a run checks its workspace source
but prepares nothing (the worker that drives the run does, and hands the files to the
sandbox's uid), so compose runs `web` as the unprivileged `harness` user with no
capabilities and a read-only root filesystem."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import docker
import pytest
import yaml
from django.contrib.auth.models import User
from pytest_django import Settings

from core.errors import InputError
from runs.models import Artifact, Run
from runs.persistence.artifacts import ArtifactStorage
from runs.runtime import advance, create_run, workspace_root
from tests.fixtures_services import ROOT
from tests.runs_waiting import DEMO_CONTRACT, SCRIPTED_DEMO


@pytest.mark.django_db
def test_it_creates_a_run_without_touching_the_workspace_and_refuses_a_bad_source(operator: User) -> None:
    run = create_run(DEMO_CONTRACT, SCRIPTED_DEMO, operator, enqueue=False)
    assert not workspace_root(run).exists() and run.revision == ""
    outside = {**DEMO_CONTRACT, "workspace": {"kind": "path", "path": "/etc"}}
    with pytest.raises(InputError, match="outside the allowed workspace sources"):
        create_run(outside, SCRIPTED_DEMO, operator, enqueue=False)
    missing = {**DEMO_CONTRACT, "workspace": {"kind": "path", "path": "examples/no-such-dir"}}
    with pytest.raises(InputError, match="is not a directory"):
        create_run(missing, SCRIPTED_DEMO, operator, enqueue=False)
    assert Run.objects.count() == 1


@pytest.mark.docker
@pytest.mark.django_db(transaction=True)
def test_it_prepares_the_workspace_in_the_worker_that_drives_the_run(operator: User, docker_engine: docker.DockerClient) -> None:
    run = create_run(DEMO_CONTRACT, SCRIPTED_DEMO, operator, enqueue=False)
    assert advance(str(run.pk)) == "waiting_approval"
    run.refresh_from_db()
    assert workspace_root(run).is_dir() and len(run.revision) == 40
    assert run.state["base_revision"] and run.events.get(seq=1).payload["revision"] == run.state["base_revision"]
    assert Artifact.objects.exists()
    for ref in Artifact.objects.values_list("ref", flat=True):
        assert ArtifactStorage().get(ref)  # the web process reads it from the store, not the worker's disk


@pytest.mark.docker
@pytest.mark.django_db(transaction=True)
def test_it_stops_a_run_whose_workspace_the_worker_cannot_prepare(
    operator: User, docker_engine: docker.DockerClient, tmp_path: Path, settings: Settings
) -> None:
    settings.WORKSPACE_SOURCES = [*settings.WORKSPACE_SOURCES, tmp_path]
    (tmp_path / "plain").mkdir()  # a directory, but not a git repository
    contract = {**DEMO_CONTRACT, "workspace": {"kind": "git", "path": str(tmp_path / "plain")}}
    run = create_run(contract, SCRIPTED_DEMO, operator, enqueue=False)
    assert advance(str(run.pk)) == "workspace_error"
    run.refresh_from_db()
    assert run.outcome == "workspace_error" and "not a local git repository" in run.stop_message
    last = run.events.order_by("seq").last()
    assert last is not None and last.type == "stopped"


def compose_config() -> dict[str, Any]:
    done = subprocess.run(["docker-compose", "--env-file", ".env.example", "config"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    config: dict[str, Any] = yaml.safe_load(done.stdout)
    return config


@pytest.mark.compose
def test_it_runs_the_web_service_unprivileged_in_compose_and_in_the_image() -> None:
    web = compose_config()["services"]["web"]
    assert web["user"] not in ("root", "0", "0:0") and web["user"] == "harness"
    assert web["cap_drop"] == ["ALL"] and web["read_only"] is True
    dockerfile = (ROOT / "Dockerfile").read_text()
    users = [line.split()[1] for line in dockerfile.splitlines() if line.startswith("USER ")]
    assert users[-1] == "harness" and "useradd --system --uid 10001" in dockerfile
    assert "requirements-dev" not in dockerfile and "pip install -r requirements.lock" in dockerfile
    product = (ROOT / "requirements.txt").read_text().lower()
    for tool in ("pytest", "playwright", "mypy", "ruff", "hypothesis", "schemathesis"):
        assert tool not in product
