"""Shared fixtures: personas; the real worker and web processes are in fixtures_services."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Group, User

from projects.models import Membership, Project, Role
from runs.roles import ROLE_PERMISSIONS, ensure_roles

pytest_plugins = [
    "tests.fixtures_services",
    "tests.fixtures_runtimes",
    "tests.fixtures_sandbox",
    "tests.fixtures_web",
    "tests.fixtures_prometheus",
    "tests.fixtures_oidc",
    "tests.fixtures_smtp",
]


def _persona(username: str, *groups: str, staff: bool = False) -> User:
    if Group.objects.filter(name__in=ROLE_PERMISSIONS).count() < len(ROLE_PERMISSIONS):
        ensure_roles()  # migrate and every flush create them; this is for a test that removed one
    user = User.objects.create_user(username=username, password=f"{username}-pass-123", is_staff=staff)
    for name in groups:
        user.groups.add(Group.objects.get(name=name))
    return user


@pytest.fixture
def resumes(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The runs woken (``runs.queue.enqueue_resume``), kept here instead of sent to a
    broker nobody reads in these tests (the test drives the run itself)."""
    woken: list[str] = []
    monkeypatch.setattr("runs.queue.enqueue_resume", woken.append)
    return woken


@pytest.fixture
def reviewer(db: None) -> User:
    return _persona("rita-reviewer", "reviewer")


@pytest.fixture
def operator(db: None) -> User:
    return _persona("otto-operator", "operator")


@pytest.fixture
def admin_user(db: None) -> User:
    return _persona("ada-admin", "admin", staff=True)


@pytest.fixture
def project_admin(db: None) -> User:
    """The default project's admin, held in person: no global group, no staff flag."""
    user = _persona("paz-project-admin")
    Membership.objects.create(project=Project.objects.get(slug="default"), user=user, role=Role.ADMIN)
    return user


@pytest.fixture
def outsider(db: None) -> User:
    return _persona("oscar-outsider")


@pytest.fixture
def other_project(db: None) -> Project:
    return Project.objects.create(slug="elsewhere", name="Elsewhere")


@pytest.fixture
def other_member(other_project: Project) -> User:
    """A reviewer and operator of another project, and of nothing here."""
    user = _persona("mona-member")
    for role in (Role.REVIEWER, Role.OPERATOR):
        Membership.objects.create(project=other_project, user=user, role=role)
    return user
