"""Shared fixtures: personas, and the environment every test process runs with."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Group, User

from runs.roles import ensure_roles


@pytest.fixture(autouse=True)
def _isolated_dirs(settings, tmp_path):
    settings.ARTIFACT_ROOT = tmp_path / "artifacts"
    settings.WORKSPACE_ROOT = tmp_path / "workspaces"
    settings.OUTBOX_DIR = tmp_path / "outbox"


def _persona(username: str, *groups: str, staff: bool = False) -> User:
    ensure_roles()
    user = User.objects.create_user(username=username, password=f"{username}-pass-123", is_staff=staff)
    for name in groups:
        user.groups.add(Group.objects.get(name=name))
    return user


@pytest.fixture
def reviewer(db) -> User:
    return _persona("rita-reviewer", "reviewer")


@pytest.fixture
def operator(db) -> User:
    return _persona("otto-operator", "operator")


@pytest.fixture
def admin_user(db) -> User:
    return _persona("ada-admin", "admin", staff=True)


@pytest.fixture
def outsider(db) -> User:
    return _persona("oscar-outsider")
