"""Projects and their members in the Django admin, for site admins alone, every change
in the project's audit (who, what, when); the audit page of a project for its admins
(issue 29)."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from projects.audit import record
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
        "reserve_tokens": "0",
        "reserve_cost_usd": "0",
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


def test_it_keeps_projects_to_site_admins_and_a_projects_members_and_audit_to_its_admins(other_project: Project, admin_user: User) -> None:
    keeper = User.objects.create_user("sam-keeper", password="sam-keeper-pass-123")
    Membership.objects.create(project=other_project, user=keeper, role=Role.ADMIN)
    record(Project.objects.get(slug="default"), admin_user, "default-only-entry")
    client = signed_in(keeper)
    assert client.get(reverse("admin:projects_project_changelist")).status_code == 403
    assert client.post(reverse("admin:projects_project_add"), project_form()).status_code == 403
    members = client.get(reverse("admin:projects_membership_changelist"))
    assert members.status_code == 200 and "sam-keeper" in members.content.decode()
    # The default project's members (the global groups) are not listed, nor is it offered as a filter.
    default_id = Project.objects.get(slug="default").pk
    assert "1 membership" in members.content.decode() and f"project__id__exact={default_id}" not in members.content.decode()
    audit = client.get(reverse("admin:projects_auditentry_changelist")).content.decode()
    assert "default-only-entry" not in audit


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
