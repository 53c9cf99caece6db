"""`make up`'s demo data (issue 29): the demo users in a demo project, and a second
project with its own member, so a newcomer sees that each project's runs are its own."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.test import Client

from projects.models import AuditEntry, Membership, Project
from runs.models import Run
from tests.helpers import run_command

pytestmark = pytest.mark.django_db


def test_it_creates_the_demo_users_in_a_demo_project_and_a_second_project_with_its_own_member() -> None:
    code, out, _ = run_command("create_demo_users", "--password=demo-pass-123")
    assert code == 0 and "operator  password: demo-pass-123  (operator in project demo; created)" in out
    held = set(Membership.objects.filter(user__isnull=False).values_list("user__username", "project__slug", "role"))
    assert held == {
        ("reviewer", "demo", "reviewer"),
        ("operator", "demo", "operator"),
        ("payments", "payments", "reviewer"),
        ("payments", "payments", "operator"),
        # The payments run is started by payments, who may not decide it: a second
        # reviewer there, or its request is a dead end nobody may decide.
        ("treasurer", "payments", "reviewer"),
    }
    # Every demo user is reachable on the local mail catcher.
    assert not User.objects.filter(email="").exists()
    assert AuditEntry.objects.filter(project__slug="demo", action="membership_added").count() == 2
    assert run_command("create_demo_users", "--password=demo-pass-123")[0] == 0, "run again: reset, nothing doubled"
    assert Membership.objects.filter(user__isnull=False).count() == 5
    code, demo_run, _ = run_command("create_demo_run")
    code, payments_run, _ = run_command("create_demo_run", "--user", "payments")
    assert Run.objects.get(pk=demo_run.strip()).project.slug == "demo"
    assert Run.objects.get(pk=payments_run.strip()).project == Project.objects.get(slug="payments")
    client = Client()
    for username, sees, hidden in (("operator", demo_run, payments_run), ("payments", payments_run, demo_run)):
        client.login(username=username, password="demo-pass-123")
        page = client.get("/runs/").content.decode()
        assert sees.strip()[:8] in page and hidden.strip()[:8] not in page, username
    client.login(username="admin", password="demo-pass-123")
    page = client.get("/runs/").content.decode()
    assert demo_run.strip()[:8] in page and payments_run.strip()[:8] in page and "site admin" in page
