"""Roles are held in a project (projects.access): a run, its requests and its artifacts
answer to the roles of the run's project alone, held in person or through a group;
site admins see everything; lists are scoped to the projects where the permission is
held."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Group, User
from django.db import IntegrityError, transaction

from common import permissions as p
from projects.access import forget, scoped
from projects.models import DEFAULT_PROJECT, Membership, Project, Role
from runs.models import Run
from tests.helpers import World

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.postgres]


def run_in(project: Project | None = None) -> Run:
    run = World().create()
    if project is not None:
        Run.objects.filter(pk=run.pk).update(project=project)
        run.refresh_from_db()
    return run


def test_it_puts_a_run_nobody_placed_in_the_default_project_whose_reviewers_are_todays() -> None:
    run = run_in()
    assert run.project.slug == DEFAULT_PROJECT
    held = {(m.group.name if m.group else "", m.role) for m in Membership.objects.filter(project=run.project)}
    assert held == {("reviewer", Role.REVIEWER), ("operator", Role.OPERATOR)}


def test_it_answers_for_a_run_with_the_roles_of_its_project_alone(
    reviewer: User, operator: User, admin_user: User, outsider: User, other_member: User, other_project: Project
) -> None:
    here, there = run_in(), run_in(other_project)
    expected = {
        # user: (may decide here, may decide there, may kill here, may kill there)
        reviewer: (True, False, False, False),
        operator: (False, False, True, False),
        admin_user: (True, True, True, True),
        other_member: (False, True, False, True),
        outsider: (False, False, False, False),
    }
    for user, answers in expected.items():
        found = (
            user.has_perm(p.DECIDE_APPROVALS, here),
            user.has_perm(p.DECIDE_APPROVALS, there),
            user.has_perm(p.OPERATE_RUNS, here),
            user.has_perm(p.OPERATE_RUNS, there),
        )
        assert found == answers, user.username
    assert other_member.has_perm(p.VIEW_RUNS) and not outsider.has_perm(p.VIEW_RUNS)


def test_it_scopes_a_list_to_the_projects_where_the_permission_is_held(
    reviewer: User, admin_user: User, outsider: User, other_member: User, other_project: Project
) -> None:
    here, there = run_in(), run_in(other_project)

    def seen(user: User) -> set[str]:
        return {str(pk) for pk in scoped(Run.objects.all(), user, p.VIEW_RUNS).values_list("pk", flat=True)}

    assert seen(reviewer) == {str(here.pk)}
    assert seen(other_member) == {str(there.pk)}
    assert seen(admin_user) == {str(here.pk), str(there.pk)}
    assert seen(outsider) == set()


def test_it_gives_a_groups_members_the_role_the_group_holds_and_takes_it_back(outsider: User, other_project: Project) -> None:
    there = run_in(other_project)
    security = Group.objects.create(name="security")
    outsider.groups.add(security)
    membership = Membership.objects.create(project=other_project, group=security, role=Role.REVIEWER)
    assert outsider.has_perm(p.DECIDE_APPROVALS, there) and not outsider.has_perm(p.OPERATE_RUNS, there)
    membership.delete()
    assert outsider.has_perm(p.DECIDE_APPROVALS, there), "held for the life of the user object (one request)"
    forget(outsider)
    assert not outsider.has_perm(p.DECIDE_APPROVALS, there)


def test_it_refuses_a_membership_held_by_nobody_or_by_both_a_user_and_a_group(outsider: User, other_project: Project) -> None:
    group = Group.objects.create(name="both")
    for holder in ({}, {"user": outsider, "group": group}):
        with pytest.raises(IntegrityError), transaction.atomic():
            Membership.objects.create(project=other_project, role=Role.REVIEWER, **holder)
