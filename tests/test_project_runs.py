"""A run names its project (issue 29): the new-run page and the API take one, the
default is the only project where the starter may start runs (else ``default``), and
starting needs the starter's permission in that project; the runs list names each
run's project."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.exceptions import PermissionDenied
from django.test import Client
from django.urls import reverse
from rest_framework.test import APIClient

from api.models import ApiToken
from core.errors import InputError
from projects.models import DEFAULT_PROJECT, Membership, Project, Role
from runs.runtime import create_run, workspace_for
from sandbox.workspace.sources import WorkspaceSourceError
from tests.test_api import SCRIPT, SMALL_CONTRACT

pytestmark = pytest.mark.django_db


def start(user: User | None, project: str | None = None) -> Any:
    return create_run(SMALL_CONTRACT, SCRIPT, user, project=project, enqueue=False)


def test_it_starts_a_run_in_the_only_project_where_the_starter_may_start_runs(
    operator: User, other_member: User, other_project: Project
) -> None:
    assert start(operator).project.slug == DEFAULT_PROJECT
    assert start(other_member).project == other_project
    assert start(None).project.slug == DEFAULT_PROJECT, "the command line starts in the default project"


def test_it_starts_in_the_default_project_when_the_starter_may_start_runs_in_several(other_member: User, other_project: Project) -> None:
    Membership.objects.create(project=Project.objects.get(slug=DEFAULT_PROJECT), user=other_member, role=Role.OPERATOR)
    assert start(other_member).project.slug == DEFAULT_PROJECT
    assert start(other_member, other_project.slug).project == other_project


def test_it_refuses_a_project_where_the_starter_may_not_start_runs_as_one_that_does_not_exist(
    reviewer: User, other_member: User, other_project: Project, admin_user: User
) -> None:
    answers = []
    for user, project in ((other_member, DEFAULT_PROJECT), (other_member, "nowhere"), (reviewer, DEFAULT_PROJECT)):
        with pytest.raises(PermissionDenied) as refused:
            start(user, project)
        answers.append(str(refused.value).replace(project, "P"))
    assert len(set(answers)) == 1, answers
    with pytest.raises(InputError) as unknown:
        start(admin_user, "nowhere")
    assert unknown.value.problems[0].field == "project" and "nowhere" in unknown.value.problems[0].message
    assert start(admin_user, other_project.slug).project == other_project, "a site admin starts runs anywhere"


def api(user: User) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {ApiToken.issue(user)[1]}")
    return client


def test_it_takes_the_project_in_the_api_and_says_it_of_every_run(other_member: User, other_project: Project, operator: User) -> None:
    created = api(other_member).post("/api/runs/", {"contract": SMALL_CONTRACT, "proposer": SCRIPT}, format="json")
    assert created.status_code == 201, created.content
    assert created.json()["project"] == other_project.slug
    named = api(other_member).post("/api/runs/", {"contract": SMALL_CONTRACT, "proposer": SCRIPT, "project": "elsewhere"}, format="json")
    assert named.status_code == 201 and named.json()["project"] == "elsewhere"
    for project in (DEFAULT_PROJECT, "nowhere"):
        refused = api(other_member).post("/api/runs/", {"contract": SMALL_CONTRACT, "proposer": SCRIPT, "project": project}, format="json")
        assert refused.status_code == 403, refused.content
    listed = api(other_member).get("/api/runs/?project=elsewhere").json()["results"]
    assert [run["project"] for run in listed] == ["elsewhere", "elsewhere"]
    assert api(operator).get("/api/runs/?project=elsewhere").json()["results"] == []


def test_it_offers_on_the_form_only_the_projects_where_the_user_may_start_runs(
    other_member: User, other_project: Project, operator: User
) -> None:
    client = Client()
    client.force_login(other_member)
    page = client.get(reverse("runs:new")).content.decode()
    assert 'value="elsewhere" selected' in page and 'value="default"' not in page
    form = {"project": DEFAULT_PROJECT, "template": "demo", "contract": "", "proposer_kind": "scripted", "proposer_options": ""}
    refused = client.post(reverse("runs:new"), form)
    assert refused.status_code == 400 and "not one of the available choices" in refused.content.decode()
    started = client.post(reverse("runs:new"), {**form, "project": "elsewhere"})
    assert started.status_code == 302, started.content.decode()[:2000]
    client.force_login(operator)
    start(operator)
    rows = client.get(reverse("runs:list")).content.decode()
    assert 'data-label="Project"' in rows and ">default<" in rows and ">elsewhere<" not in rows


GIT_CONTRACT = {**SMALL_CONTRACT, "workspace": {"kind": "git", "url": "https://git.example.com/team-b/orders.git"}}


def test_it_refuses_a_workspace_path_outside_the_projects_own_sources_naming_the_field(other_member: User, other_project: Project) -> None:
    other_project.workspace_sources = ["examples/demo"]
    other_project.save()
    with pytest.raises(InputError) as refused:
        start(other_member)
    problem = refused.value.problems[0]
    assert problem.field == "workspace.path" and "project 'elsewhere'" in problem.message and "examples/demo" in problem.message
    answer = api(other_member).post("/api/runs/", {"contract": SMALL_CONTRACT, "proposer": SCRIPT}, format="json")
    assert answer.status_code == 400 and "project 'elsewhere'" in answer.json()["contract.workspace.path"][0]
    other_project.workspace_sources = ["examples/orders"]
    other_project.save()
    assert start(other_member).project == other_project


def test_it_refuses_a_remote_outside_the_projects_own_remotes_and_never_widens_the_servers(
    other_member: User, other_project: Project, settings: Any
) -> None:
    settings.GIT_ALLOWED_REMOTES = ["https://git.example.com/"]
    other_project.git_remotes = ["https://git.example.com/team-a/", "https://elsewhere.example.com/"]
    other_project.save()

    def started(url: str) -> Any:
        return create_run({**GIT_CONTRACT, "workspace": {"kind": "git", "url": url}}, SCRIPT, other_member, enqueue=False)

    with pytest.raises(InputError) as outside:
        started("https://git.example.com/team-b/orders.git")
    assert outside.value.problems[0].field == "workspace.url" and "project 'elsewhere'" in outside.value.problems[0].message
    with pytest.raises(InputError, match="HARNESS_GIT_ALLOWED_REMOTES"):
        started("https://elsewhere.example.com/orders.git")  # the project's list, not the server's
    assert started("https://git.example.com/team-a/orders.git").project == other_project
    answer = api(other_member).post("/api/runs/", {"contract": GIT_CONTRACT, "proposer": SCRIPT}, format="json")
    assert answer.status_code == 400 and "git remotes" in answer.json()["contract.workspace.url"][0]


def test_it_checks_the_projects_sources_again_where_the_worker_prepares_the_workspace(other_member: User, other_project: Project) -> None:
    run = start(other_member)
    other_project.workspace_sources = ["examples/demo"]
    other_project.save()
    run.refresh_from_db()
    with pytest.raises(WorkspaceSourceError, match="project 'elsewhere'"):
        workspace_for(run)
