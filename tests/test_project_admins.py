"""A project's admins in the Django admin (issue 29): let in by their project role, no
staff flag needed; they manage their project's members (audited) and policies, and
reach nothing of another project's; someone with no admin role anywhere is not let in.
The policy editor asks which project when the user may add to several."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from projects.models import AuditEntry, Membership, Project, Role

pytestmark = pytest.mark.django_db

ADD_POLICY = "/admin/approvals/policyversion/add/"


def admin_of(*projects: Project, name: str = "pam-project-admin") -> User:
    user = User.objects.create_user(name, password=f"{name}-pass-123")
    for project in projects:
        Membership.objects.create(project=project, user=user, role=Role.ADMIN)
    return user


def signed_in_to_admin(user: User) -> Client:
    """Through the admin's own sign-in form, as a person would."""
    client = Client()
    page = client.post("/admin/login/?next=/admin/", {"username": user.username, "password": f"{user.username}-pass-123"})
    assert page.status_code == 302 and page["Location"] == "/admin/", page.content.decode()[:2000]
    return client


def test_it_lets_a_project_admin_in_without_the_staff_flag_and_shows_their_projects_pages(other_project: Project) -> None:
    keeper = admin_of(other_project)
    assert not keeper.is_staff
    index = signed_in_to_admin(keeper).get("/admin/").content.decode()
    for shown in (
        "/admin/approvals/policyversion/",
        "/admin/projects/membership/",
        "/admin/projects/auditentry/",
        "/admin/notifications/webhookendpoint/",
    ):
        assert shown in index, shown
    for hidden in ("/admin/auth/user/", "/admin/projects/project/"):
        assert hidden not in index, hidden


def test_it_refuses_the_admins_sign_in_to_a_reviewer_with_no_admin_role(reviewer: User) -> None:
    page = Client().post("/admin/login/?next=/admin/", {"username": reviewer.username, "password": f"{reviewer.username}-pass-123"})
    assert page.status_code == 200 and "Please enter the correct username and password for a staff account" in page.content.decode()
    client = Client()
    client.force_login(reviewer)
    assert client.get("/admin/").status_code == 302  # to the admin's sign-in page


def test_it_lets_a_project_admin_manage_their_projects_members_alone_with_the_audit(
    other_project: Project, other_member: User, reviewer: User
) -> None:
    keeper = admin_of(other_project)
    client = signed_in_to_admin(keeper)
    add = reverse("admin:projects_membership_add")
    added = client.post(add, {"project": other_project.pk, "user": reviewer.pk, "group": "", "role": Role.REVIEWER})
    assert added.status_code == 302
    membership = Membership.objects.get(project=other_project, user=reviewer)
    entry = AuditEntry.objects.get(project=other_project, action="membership_added", detail__user=reviewer.username)
    assert entry.actor == keeper and entry.detail["role"] == "reviewer"

    default = Project.objects.get(slug="default")
    refused = client.post(add, {"project": default.pk, "user": reviewer.pk, "group": "", "role": Role.ADMIN})
    assert refused.status_code == 200 and "Select a valid choice" in refused.content.decode()
    assert not Membership.objects.filter(project=default, user=reviewer).exists()
    # The default project's memberships (its global groups) are not found, as if they did not exist.
    theirs = Membership.objects.filter(project=default).first()
    assert theirs is not None
    change = reverse("admin:projects_membership_change", args=[theirs.pk])
    assert client.get(change).status_code == 302  # the admin's "does not exist" answer: back to the index
    assert client.post(reverse("admin:projects_membership_delete", args=[theirs.pk]), {"post": "yes"}).status_code == 302
    assert Membership.objects.filter(pk=theirs.pk).exists()

    removed = client.post(reverse("admin:projects_membership_delete", args=[membership.pk]), {"post": "yes"})
    assert removed.status_code == 302 and not Membership.objects.filter(pk=membership.pk).exists()
    assert AuditEntry.objects.filter(project=other_project, action="membership_removed", actor=keeper).exists()


def test_it_asks_which_project_before_the_policy_editor_for_an_admin_of_several(other_project: Project) -> None:
    default = Project.objects.get(slug="default")
    client = signed_in_to_admin(admin_of(default, other_project))
    choice = client.get(ADD_POLICY).content.decode()
    assert "Which project" in choice and "?project=default" in choice and "?project=elsewhere" in choice
    editor = client.get(f"{ADD_POLICY}?project=elsewhere").content.decode()
    assert "elsewhere: starting from v1" in editor
    single = signed_in_to_admin(admin_of(other_project, name="sol-single"))
    assert "elsewhere: starting from v1" in single.get(ADD_POLICY).content.decode()
