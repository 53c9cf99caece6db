"""A project owns its policies (issue 29; docs/design.md, Approvals): versions count
within a project, a run starts under its project's policy and its gates adopt that
project's new versions alone, a save lapses only the waiting requests of its own
project's runs, and a project's admins see and edit its policies alone."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client

from approvals.models import ApprovalRequest, PolicyVersion
from approvals.policies import current_policy_row, default_policy_document
from projects.models import DEFAULT_PROJECT, AuditEntry, Membership, Project, Role
from runs import invariants
from runs.approval_flow.flow import check_decision_now, pending_requests, save_policy_version, staleness_now
from runs.approval_flow.gate import DjangoApprovals
from runs.models import Run
from runs.runtime import create_run
from runs.services import CurrentPolicy, drive_run
from tests.helpers import KillFlag, World
from tests.test_api import SCRIPT, SMALL_CONTRACT

pytestmark = pytest.mark.django_db

ADD = "/admin/approvals/policyversion/add/"


@pytest.fixture
def resumes(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The wake-ups sent, instead of to a broker nobody reads in these tests."""
    woken: list[str] = []
    monkeypatch.setattr("runs.scheduling.queue.enqueue_resume", woken.append)
    return woken


@pytest.fixture
def alpha() -> Project:
    return Project.objects.create(slug="alpha", name="Alpha")


@pytest.fixture
def beta() -> Project:
    return Project.objects.create(slug="beta", name="Beta")


def edited(project: Project, publish: str | None = None, **fields: object) -> dict[str, Any]:
    """The project's current document (without its version), edited."""
    document = {key: value for key, value in current_policy_row(project.pk).document.items() if key != "version"}
    document.update(fields)
    if publish is not None:
        document["rules"] = [{**rule, "decision": publish} if rule["tool"] == "publish" else rule for rule in document["rules"]]
    return document


def waiting_in(project: Project, starter: User) -> tuple[World, Run, ApprovalRequest]:
    world = World()
    run = world.create(actor=starter, project_id=project.pk)
    state = drive_run(run, world.environment(), DjangoApprovals(run), controls=KillFlag(str(run.pk)))
    assert state.status == "waiting_approval", state.outcome
    return world, run, ApprovalRequest.objects.get(run=run, status="pending")


def test_it_lapses_only_the_saving_projects_waiting_requests(
    alpha: Project, beta: Project, operator: User, reviewer: User, resumes: list[str], django_capture_on_commit_callbacks: Any
) -> None:
    for project in (alpha, beta):
        Membership.objects.create(project=project, user=reviewer, role=Role.REVIEWER)
    world_a, run_a, request_a = waiting_in(alpha, operator)
    world_b, run_b, request_b = waiting_in(beta, operator)
    assert request_a.policy_version == request_b.policy_version == 1

    saved = PolicyVersion(project=alpha, note="alpha allows publishing")
    with django_capture_on_commit_callbacks(execute=True):
        stale = save_policy_version(saved, edited(alpha, publish="allow"))

    assert saved.version == 2 and stale == [str(request_a.pk)] and resumes == [str(run_a.pk)]
    request_a.refresh_from_db()
    request_b.refresh_from_db()
    assert request_a.status == "stale" and "policy v2 replaced v1" in request_a.reason
    assert request_b.status == "pending" and staleness_now(request_b) is None
    check_decision_now(request_b, reviewer, granting=True)  # beta's request can still be granted
    assert list(pending_requests()) == [request_b]
    # The sweep compares each request with its own project's policy, too.
    assert invariants.lapse_stale_requests() == 0
    assert current_policy_row(beta.pk).version == 1 and current_policy_row().version == 1
    # The save is audited in alpha's trail.
    entry = AuditEntry.objects.get(project=alpha, action="policy_saved")
    assert entry.detail == {"version": 2, "note": "alpha allows publishing", "stale_requests": 1}

    # alpha's run goes back through the gates under alpha's v2, which lets it publish.
    run_a.refresh_from_db()
    state = drive_run(run_a, world_a.environment(), DjangoApprovals(run_a), controls=KillFlag(str(run_a.pk)))
    assert state.outcome == "complete" and state.policy_version == 2
    # beta's gates never adopt alpha's versions.
    assert CurrentPolicy(beta.pk).current().version == 1
    assert CurrentPolicy(alpha.pk).current().rules != CurrentPolicy(beta.pk).current().rules


def test_it_starts_a_new_run_in_b_under_bs_policy(alpha: Project, beta: Project, admin_user: User) -> None:
    # A project with no policy yet starts from the default document, as version 1.
    assert not PolicyVersion.objects.filter(project=beta).exists()
    first = current_policy_row(beta.pk)
    assert first.project == beta and first.version == 1
    assert {k: v for k, v in first.document.items() if k != "version"} == {
        k: v for k, v in default_policy_document().items() if k != "version"
    }
    save_policy_version(PolicyVersion(project=alpha), edited(alpha, approval_ttl_seconds=60))
    save_policy_version(PolicyVersion(project=alpha), edited(alpha, approval_ttl_seconds=90))
    save_policy_version(PolicyVersion(project=beta, note="beta's own"), edited(beta, approval_ttl_seconds=1200))

    run = create_run(SMALL_CONTRACT, SCRIPT, admin_user, project="beta", enqueue=False)

    assert run.project == beta and run.policy.project == beta and run.policy.version == 2
    assert run.policy.document["approval_ttl_seconds"] == 1200
    assert (run.state or {})["policy_version"] == 2
    # The default project is untouched by either project's saves.
    default = Project.objects.get(slug=DEFAULT_PROJECT)
    assert current_policy_row().project == default and current_policy_row().version == 1
    # A run made without naming its project goes to the default project under its policy.
    assert World().create().policy == current_policy_row()


def project_admin_of(project: Project) -> Client:
    user = User.objects.create_user("pat-admin", password="pat-admin-pass-123")  # no staff: the project role lets them in
    Membership.objects.create(project=project, user=user, role=Role.ADMIN)
    client = Client()
    client.force_login(user)
    return client


def document_json(project: Project, **changes: Any) -> str:
    return json.dumps(edited(project, **changes))


def test_it_keeps_a_project_admin_of_b_out_of_as_policy(alpha: Project, beta: Project) -> None:
    save_policy_version(PolicyVersion(project=alpha, note="alpha-secret-note"), edited(alpha, approval_ttl_seconds=60))
    a_version = current_policy_row(alpha.pk)
    b_first = current_policy_row(beta.pk)
    client = project_admin_of(beta)

    listing = client.get("/admin/approvals/policyversion/").content.decode()
    assert "alpha-secret-note" not in listing and f"/admin/approvals/policyversion/{b_first.pk}/change/" in listing
    assert "?project__slug=alpha" not in listing  # the filter offers beta alone
    # alpha's version is not found, as one that does not exist.
    assert client.get(f"/admin/approvals/policyversion/{a_version.pk}/change/").status_code == 302
    assert client.get(f"{ADD}?project=alpha").status_code == 404
    assert client.get(f"{ADD}?project=no-such-project").status_code == 404
    assert client.get("/admin/approvals/policyversion/compare/?project=alpha&old=1&new=2").status_code == 404
    refused = client.post(f"{ADD}?project=alpha", {"document_text": document_json(alpha), "note": "from beta"})
    assert refused.status_code == 404
    assert PolicyVersion.objects.filter(project=alpha).count() == 2
    # Comparing alpha's version with beta's in one action is not offered a project's
    # admin, who cannot select alpha's; a site admin is told to pick one project's.

    # Beta's own: seen, saved (by default into beta, the admin's only project) and compared.
    assert client.get(ADD).status_code == 200
    saved = client.post(ADD, {"document_text": document_json(beta, approval_ttl_seconds=300), "note": "beta's edit"})
    assert saved.status_code == 302
    newest = current_policy_row(beta.pk)
    assert newest.version == 2 and newest.note == "beta's edit" and newest.document["approval_ttl_seconds"] == 300
    assert current_policy_row(alpha.pk) == a_version
    compared = client.get("/admin/approvals/policyversion/compare/?project=beta&old=1&new=2")
    assert compared.status_code == 200 and "approval_ttl_seconds" in compared.content.decode()


def test_it_compares_versions_within_one_project(alpha: Project, admin_user: User) -> None:
    default_v1 = current_policy_row()
    alpha_v1 = current_policy_row(alpha.pk)
    save_policy_version(PolicyVersion(project=alpha), edited(alpha, approval_ttl_seconds=60))
    alpha_v2 = current_policy_row(alpha.pk)
    client = Client()
    client.force_login(admin_user)
    # A site admin sees every project's versions.
    listing = client.get("/admin/approvals/policyversion/").content.decode()
    assert all(f"/admin/approvals/policyversion/{row.pk}/change/" in listing for row in (default_v1, alpha_v1, alpha_v2))
    # The version before alpha's v2 is alpha's v1, not the default project's.
    page = client.get(f"/admin/approvals/policyversion/{alpha_v2.pk}/change/").content.decode()
    assert "--- policy v1" in page and "approval_ttl_seconds&quot;: 60" in page
    assert "?project=alpha&amp;from=2" in page and "compare/?project=alpha&amp;old=1&amp;new=2" in page
    mixed = client.post(
        "/admin/approvals/policyversion/", {"action": "compare_versions", "_selected_action": [default_v1.pk, alpha_v2.pk]}, follow=True
    )
    assert "Select two versions of one project" in mixed.content.decode()
    same = client.post("/admin/approvals/policyversion/", {"action": "compare_versions", "_selected_action": [alpha_v1.pk, alpha_v2.pk]})
    assert same["Location"] == "/admin/approvals/policyversion/compare/?project=alpha&old=1&new=2"
    # Saving in alpha from the default project's form would need ?project=alpha.
    assert client.get(f"{ADD}?project=alpha&from=2").status_code == 200
    assert client.get(f"{ADD}?project=alpha&from=9").status_code == 404
