"""Projects and their members in the Django admin, for site admins alone, every change
in the project's audit (who, what, when); the audit page of a project for its admins
(issue 29)."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from projects.models import AuditEntry, Membership, Project, Role

pytestmark = pytest.mark.django_db


def signed_in(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


def project_form(**fields: Any) -> dict[str, Any]:
    form = {
        "slug": "payments",
        "name": "Payments",
        "workspace_sources": "[]",
        "git_remotes": "[]",
        "max_active_runs": "",
        "memberships-TOTAL_FORMS": "0",
        "memberships-INITIAL_FORMS": "0",
        "memberships-MIN_NUM_FORMS": "0",
        "memberships-MAX_NUM_FORMS": "1000",
    }
    return {**form, **fields}


def actions(project: Project | None) -> list[tuple[str, str | None]]:
    entries = AuditEntry.objects.filter(project=project).order_by("at", "pk")
    return [(entry.action, entry.actor.username if entry.actor else None) for entry in entries]


def test_it_audits_a_project_and_its_members_changed_in_the_admin(admin_user: User, outsider: User) -> None:
    client = signed_in(admin_user)
    added = client.post(
        reverse("admin:projects_project_add"),
        project_form(
            **{
                "memberships-TOTAL_FORMS": "1",
                "memberships-0-user": str(outsider.pk),
                "memberships-0-role": Role.REVIEWER,
            }
        ),
    )
    assert added.status_code == 302, added.content.decode()[:3000]
    project = Project.objects.get(slug="payments")
    assert actions(project) == [("project_created", "ada-admin"), ("membership_added", "ada-admin")]
    assert AuditEntry.objects.filter(action="membership_added", project=project).get().detail == {
        "user": outsider.username,
        "role": "reviewer",
    }
    membership = Membership.objects.get(project=project)
    changed = client.post(
        reverse("admin:projects_project_change", args=[project.pk]),
        project_form(
            max_active_runs="2",
            paused="on",
            **{
                "memberships-TOTAL_FORMS": "1",
                "memberships-INITIAL_FORMS": "1",
                "memberships-0-id": str(membership.pk),
                "memberships-0-project": str(project.pk),
                "memberships-0-user": str(outsider.pk),
                "memberships-0-role": Role.OPERATOR,
            },
        ),
    )
    assert changed.status_code == 302, changed.content.decode()[:3000]
    entries = {e.action: e.detail for e in AuditEntry.objects.filter(project=project)}
    assert entries["project_changed"] == {"max_active_runs": [None, 2]}
    assert "project_paused" in entries
    assert entries["membership_changed"] == {
        "user": outsider.username,
        "role": "operator",
        "was": {"user": outsider.username, "role": "reviewer"},
    }
    deleted = client.post(reverse("admin:projects_membership_delete", args=[membership.pk]), {"post": "yes"})
    assert deleted.status_code == 302
    assert actions(project)[-1] == ("membership_removed", "ada-admin")
    assert AuditEntry.objects.filter(project=project).count() == 6
    listed = client.get(reverse("admin:projects_auditentry_changelist") + f"?project__id__exact={project.pk}")
    assert listed.status_code == 200 and "membership_removed" in listed.content.decode()


def test_it_refuses_a_projects_remotes_or_sources_the_server_could_not_read(admin_user: User) -> None:
    client = signed_in(admin_user)
    page = client.post(reverse("admin:projects_project_add"), project_form(git_remotes='["https://git.example.com/team/*/x"]'))
    assert page.status_code == 200 and "wildcards are not read" in page.content.decode()
    page = client.post(reverse("admin:projects_project_add"), project_form(workspace_sources='["/etc"]'))
    assert page.status_code == 200 and "outside the server&#x27;s workspace sources" in page.content.decode()
    assert not Project.objects.filter(slug="payments").exists() and not AuditEntry.objects.filter(action="project_created").exists()


def test_it_keeps_projects_members_and_the_audit_to_site_admins_in_the_admin(other_project: Project) -> None:
    staff = User.objects.create_user("sam-staff", password="sam-staff-pass-123", is_staff=True)
    Membership.objects.create(project=other_project, user=staff, role=Role.ADMIN)
    client = signed_in(staff)
    for name in ("admin:projects_project_changelist", "admin:projects_membership_changelist", "admin:projects_auditentry_changelist"):
        assert client.get(reverse(name)).status_code == 403, name
    assert client.post(reverse("admin:projects_project_add"), project_form()).status_code == 403


def test_it_shows_a_projects_audit_to_its_admins_alone(
    other_project: Project, other_member: User, admin_user: User, operator: User
) -> None:
    keeper = User.objects.create_user("pia-project-admin", password="pia-pass-123")
    Membership.objects.create(project=other_project, user=keeper, role=Role.ADMIN)
    AuditEntry.objects.create(project=other_project, actor=admin_user, action="membership_added", detail={"user": "pia", "role": "admin"})
    url = reverse("project-audit", args=["elsewhere"])
    page = signed_in(keeper).get(url)
    assert page.status_code == 200 and "ada-admin" in page.content.decode() and "membership added" in page.content.decode()
    assert signed_in(admin_user).get(url).status_code == 200
    assert signed_in(other_member).get(url).status_code == 403, "an operator of the project is not its admin"
    assert signed_in(keeper).get(reverse("project-audit", args=["default"])).status_code == 404
    assert signed_in(keeper).get(reverse("project-audit", args=["nowhere"])).status_code == 404
    assert signed_in(operator).get(url).status_code == 403
    anonymous = Client().get(url)
    assert anonymous.status_code == 302
