"""Shared fixtures: personas; the real worker and web processes are in fixtures_services."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from collections.abc import Iterator

import pytest
from django.contrib.auth.models import Group, User
from hypothesis import HealthCheck
from hypothesis import settings as hypothesis_settings
from pytest_django import Settings

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
    "tests.agents_support.rig",
]

# A property's examples can take seconds to generate on these shared machines (seen at
# load 14: "input generation is slow" failed two properties that hold, on main too). The
# property is what a test checks, not how fast its inputs or examples come: neither the
# generation health check nor a per-example deadline fails a test.
hypothesis_settings.register_profile("shared-machine", suppress_health_check=[HealthCheck.too_slow], deadline=None)
hypothesis_settings.load_profile("shared-machine")


@pytest.fixture(autouse=True)
def dev_null_stays_the_null_device() -> Iterator[None]:
    """Once, mid-suite, /dev/null became an empty regular file owned by nobody, and
    every later git command failed reading it as its config. The test during which it
    happens fails, naming it, and the device is made again for the tests after it."""
    yield
    if stat.S_ISCHR(os.stat("/dev/null").st_mode):
        return
    found = os.stat("/dev/null")
    os.unlink("/dev/null")
    subprocess.run(["mknod", "-m", "666", "/dev/null", "c", "1", "3"], check=True)
    pytest.fail(f"/dev/null was replaced during this test by a regular file (uid {found.st_uid}, {found.st_size} bytes); made again")


def _persona(username: str, *groups: str, staff: bool = False) -> User:
    if Group.objects.filter(name__in=ROLE_PERMISSIONS).count() < len(ROLE_PERMISSIONS):
        ensure_roles()  # migrate and every flush create them; this is for a test that removed one
    user = User.objects.create_user(username=username, password=f"{username}-pass-123", is_staff=staff)
    for name in groups:
        user.groups.add(Group.objects.get(name=name))
    return user


@pytest.fixture
def resumes(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The runs woken (``runs.scheduling.queue.enqueue_resume``), kept here instead of sent to a
    broker nobody reads in these tests (the test drives the run itself)."""
    woken: list[str] = []
    monkeypatch.setattr("runs.scheduling.queue.enqueue_resume", woken.append)
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


@pytest.fixture
def fresh_ledger(transactional_db: None) -> None:
    """An empty decision ledger: the flush before each test leaves the default project's
    membership entries (projects.models.ensure_default_project) in it, and a test that
    numbers the chain from its start, or measures its first entry, wants none."""
    from ledger.models import Content, Entry, Head
    from ledger.writer import forget_heads

    Entry.objects.all().delete()
    Head.objects.all().delete()
    Content.objects.all().delete()
    forget_heads()


@pytest.fixture
def evalset_remotes(transactional_db: None, settings: Settings) -> Iterator[str]:
    """The server may use the evaluation set's git remotes (trials.remotes), and those
    the test's trials made are deleted when it ends: found by the trials (each test's
    own database), so a test beside it on another xdist worker keeps its own."""
    from trials.models import Trial
    from trials.remotes import remotes_dir

    allowed = f"{remotes_dir().as_uri()}/"
    settings.GIT_ALLOWED_REMOTES = [allowed]
    yield allowed
    for task in Trial.objects.exclude(suite="").values_list("task", flat=True):
        url = str(((task.get("contract") or {}).get("workspace") or {}).get("url", ""))
        if url.startswith(allowed):
            shutil.rmtree(remotes_dir() / url.removeprefix(allowed), ignore_errors=True)
