"""API tokens narrowed to one project and one role (issue 29): such a token acts only in
its project, with no more than its role's permissions, even when its user holds more;
a run or request of another project is answered 404, as one that does not exist; an
unnarrowed token does what its user may."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from pytest_django import Settings
from rest_framework.test import APIClient

from api.models import ApiToken
from approvals.models import ApprovalRequest
from projects.models import DEFAULT_PROJECT, AuditEntry, Membership, Project, Role
from runs.approval_flow.gate import DjangoApprovals
from runs.models import Run
from runs.services import drive_run
from tests.helpers import World

pytestmark = pytest.mark.django_db

SCRIPT = {"kind": "scripted", "script": [{"tool": "finish", "args": {"summary": "nothing to do"}}]}
CONTRACT: dict[str, Any] = {
    "task_id": "api-orders",
    "objective": "fix the negative quantity bug",
    "acceptance_criteria": ["tests pass"],
    "workspace": {"kind": "path", "path": "examples/orders"},
    "allowed_write_paths": ["orders/*"],
    "allowed_tools": ["read_file", "write_file", "run_check"],
    "verification_targets": ["tests"],
    "limits": {"max_proposals": 5, "max_tool_calls": 5, "max_attempts": 2, "wall_time_seconds": 60, "max_output_bytes_per_call": 65536},
}


def waiting_in(starter: User, project: Project | None = None) -> ApprovalRequest:
    """A run started by ``starter`` (in ``project``, else the default one) waiting for approval."""
    world = World()
    run = world.create(actor=starter)
    if project is not None:
        Run.objects.filter(pk=run.pk).update(project=project)
        run.refresh_from_db()
    drive_run(run, world.environment(), DjangoApprovals(run))
    return ApprovalRequest.objects.get(run=run, status="pending")


def client(user: User, project: Project | None = None, role: str = "") -> APIClient:
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Token {ApiToken.issue(user, project, role)[1]}")
    return api


def default() -> Project:
    return Project.objects.get(slug=DEFAULT_PROJECT)


def test_it_lets_a_narrowed_reviewer_token_decide_in_its_project_and_answers_404_elsewhere(
    admin_user: User, operator: User, other_member: User, other_project: Project
) -> None:
    here = waiting_in(operator)
    there = waiting_in(other_member, other_project)
    # A site admin's token narrowed to reviewing the default project: no more than that.
    api = client(admin_user, default(), Role.REVIEWER)
    assert {r["id"] for r in api.get("/api/runs/").json()["results"]} == {str(here.run_id)}
    assert {a["id"] for a in api.get("/api/approvals/").json()["results"]} == {str(here.pk)}
    for path in (f"/api/runs/{there.run_id}/", f"/api/runs/{there.run_id}/events/", f"/api/approvals/{there.pk}/"):
        assert api.get(path).status_code == 404, path
    for path, body in (
        (f"/api/approvals/{there.pk}/grant/", None),
        (f"/api/approvals/{there.pk}/deny/", {"reason": "no"}),
        (f"/api/approvals/{there.pk}/request-changes/", {"message": "no"}),
    ):
        assert api.post(path, body, format="json").status_code == 404, path
    there.refresh_from_db()
    assert there.status == "pending"
    # What its role does not hold is refused in its own project too; the global switch is no project's.
    assert api.post(f"/api/runs/{here.run_id}/kill/").status_code == 403
    assert api.post("/api/switch/", {"stop_all": True}, format="json").status_code == 403
    assert not Run.objects.filter(kill_requested=True).exists()
    granted = api.post(f"/api/approvals/{here.pk}/grant/")
    assert granted.status_code == 200, granted.content
    assert granted.json()["status"] == "granted"


def test_it_answers_404_to_a_narrowed_operator_token_for_another_projects_run(
    admin_user: User, operator: User, other_member: User, other_project: Project
) -> None:
    there = waiting_in(other_member, other_project)
    api = client(admin_user, default(), Role.OPERATOR)
    assert api.post(f"/api/runs/{there.run_id}/kill/").status_code == 404
    assert api.get(f"/api/runs/{there.run_id}/report/").status_code == 404
    assert not Run.objects.get(pk=there.run_id).kill_requested


def test_it_refuses_runs_to_a_narrowed_token_that_its_role_or_project_does_not_allow(
    admin_user: User, other_member: User, other_project: Project
) -> None:
    body = {"contract": CONTRACT, "proposer": SCRIPT}
    reviewing = client(admin_user, default(), Role.REVIEWER)
    assert reviewing.post("/api/runs/", {**body, "project": DEFAULT_PROJECT}, format="json").status_code == 403
    # An operator token starts runs in its project alone, named or not, as for a project that does not exist.
    operating = client(other_member, other_project, Role.OPERATOR)
    assert operating.post("/api/runs/", {**body, "project": DEFAULT_PROJECT}, format="json").status_code == 403
    assert operating.post("/api/runs/", {**body, "project": "no-such-project"}, format="json").status_code == 403
    assert Run.objects.count() == 0
    made = operating.post("/api/runs/", body, format="json")
    assert made.status_code == 201, made.content
    assert Run.objects.get().project == other_project


def test_it_gives_an_unnarrowed_token_what_its_user_holds(
    admin_user: User, operator: User, other_member: User, other_project: Project
) -> None:
    here = waiting_in(operator)
    there = waiting_in(other_member, other_project)
    api = client(admin_user)
    assert {r["id"] for r in api.get("/api/runs/").json()["results"]} == {str(here.run_id), str(there.run_id)}
    assert api.post(f"/api/runs/{there.run_id}/kill/").status_code == 202
    assert api.post(f"/api/approvals/{here.pk}/grant/").status_code == 200
    # A member of the other project only: this project's run does not exist for them.
    assert client(other_member).get(f"/api/runs/{here.run_id}/").status_code == 404


def test_it_narrows_a_token_only_to_a_role_its_user_holds_there_and_audits_it(reviewer: User, other_project: Project) -> None:
    api = APIClient()
    credentials = {"username": reviewer.username, "password": f"{reviewer.username}-pass-123"}
    for extra in (
        {"project": "elsewhere", "role": "reviewer"},
        {"project": "nowhere", "role": "reviewer"},
        {"project": DEFAULT_PROJECT, "role": "operator"},
    ):
        refused = api.post("/api/auth/token/", {**credentials, **extra}, format="json")
        assert refused.status_code == 400 and list(refused.json()) == ["project"], refused.content
    assert api.post("/api/auth/token/", {**credentials, "role": "reviewer"}, format="json").json() == {
        "project": ["Give a project and a role together."]
    }
    assert ApiToken.objects.count() == 0
    made = api.post("/api/auth/token/", {**credentials, "project": DEFAULT_PROJECT, "role": "reviewer"}, format="json")
    assert made.status_code == 200, made.content
    row = ApiToken.objects.get()
    assert (row.project, row.role) == (default(), Role.REVIEWER)
    entry = AuditEntry.objects.filter(action="token_issued").get()
    assert entry.project == default() and entry.actor == reviewer and entry.detail["prefix"] == row.prefix


def test_it_narrows_to_what_the_user_still_holds_when_a_role_is_taken_away(outsider: User, other_project: Project) -> None:
    membership = Membership.objects.create(project=other_project, user=outsider, role=Role.REVIEWER)
    api = client(outsider, other_project, Role.REVIEWER)
    assert api.get("/api/runs/").status_code == 200
    membership.delete()
    assert api.get("/api/runs/").status_code == 403


def test_it_takes_a_narrowed_token_away_with_its_project(admin_user: User, other_project: Project) -> None:
    row, _token = ApiToken.issue(admin_user, other_project, Role.OPERATOR)
    other_project.delete()
    assert not ApiToken.objects.filter(pk=row.pk).exists()


def test_it_holds_a_superusers_narrowed_token_to_its_role(operator: User, other_member: User, other_project: Project) -> None:
    root = User.objects.create_superuser("root", password="root-pass-123")
    here = waiting_in(operator)
    there = waiting_in(other_member, other_project)
    api = client(root, default(), Role.REVIEWER)
    # Django answers every has_perm of a superuser yes: the token's role still bounds it.
    assert api.post(f"/api/runs/{here.run_id}/kill/").status_code == 403
    assert api.get(f"/api/approvals/{there.pk}/").status_code == 404
    assert api.post("/api/runs/", {"contract": CONTRACT, "proposer": SCRIPT}, format="json").status_code == 403
    assert not Run.objects.filter(kill_requested=True).exists() and Run.objects.count() == 2


def test_it_shows_a_tokens_narrowing_in_the_admin_and_audits_its_revocation(admin_user: User, reviewer: User) -> None:
    row, token = ApiToken.issue(reviewer, default(), Role.REVIEWER)
    web = Client()
    web.force_login(admin_user)
    assert "reviewer" in web.get(f"/admin/api/apitoken/{row.pk}/change/").content.decode()
    web.post("/admin/api/apitoken/", {"action": "revoke", "_selected_action": [row.pk]})
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Token {token}")
    assert api.get("/api/runs/").status_code == 401
    entry = AuditEntry.objects.get(action="token_revoked")
    assert (entry.project, entry.actor, entry.detail["prefix"]) == (default(), admin_user, row.prefix)


def test_it_does_not_count_a_refused_narrowing_as_a_wrong_password(reviewer: User, other_project: Project, settings: Settings) -> None:
    settings.HARNESS_SIGNIN_MAX_FAILURES = 2
    api = APIClient()
    credentials = {"username": reviewer.username, "password": f"{reviewer.username}-pass-123"}
    for _ in range(4):
        assert api.post("/api/auth/token/", {**credentials, "project": "elsewhere", "role": "reviewer"}, format="json").status_code == 400
    assert api.post("/api/auth/token/", credentials, format="json").status_code == 200
