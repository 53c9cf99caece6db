"""A project's decision ledger page (docs/design.md, Decision ledger): its admins see
its decisions, newest first, filtered by actor, run and kind, each linking to what it
decided on; another project's ledger is not found; site admins verify the whole chain
from it ("verify now"), which names a tampered entry."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.test import Client

from approvals.models import ApprovalRequest
from ledger.models import Entry
from runs.approval_flow.flow import grant
from runs.approval_flow.gate import DjangoApprovals
from runs.services import drive_run
from tests.helpers import KillFlag, World

pytestmark = pytest.mark.django_db(transaction=True)


def table(html: str) -> str:
    return html.split('id="ledger"', 1)[1]


def test_it_lists_filters_and_links_a_projects_decisions(
    operator: User, reviewer: User, project_admin: User, other_member: User, resumes: list[str]
) -> None:
    world = World()
    run = world.create(actor=operator)
    drive_run(run, world.environment(), DjangoApprovals(run), controls=KillFlag(str(run.pk)))
    request = ApprovalRequest.objects.get(run=run)
    grant(request, reviewer)
    client = Client()
    client.force_login(project_admin)
    page = client.get("/projects/default/ledger/")
    assert page.status_code == 200
    html = table(page.content.decode())
    assert html.index("approval.granted") < html.index("gate.asked")  # newest first
    assert f'href="/approvals/{request.pk}/"' in html
    only = table(client.get("/projects/default/ledger/", {"kind": "approval.", "actor": "rita"}).content.decode())
    assert "approval.granted" in only and "gate.allowed" not in only
    by_run = table(client.get("/projects/default/ledger/", {"run": str(run.pk)[:8]}).content.decode())
    assert "gate.allowed" in by_run
    assert "Verify now" not in page.content.decode()
    outsider = Client()
    outsider.force_login(other_member)
    assert outsider.get("/projects/default/ledger/").status_code in (403, 404)
    assert outsider.post("/ledger/verify/").status_code == 403


def test_it_verifies_now_for_a_site_admin_and_names_a_tampered_entry(operator: User, resumes: list[str]) -> None:
    world = World()
    run = world.create(actor=operator)
    drive_run(run, world.environment(), DjangoApprovals(run), controls=KillFlag(str(run.pk)))
    admin = User.objects.create_superuser("sue-site-admin", password="sue-pass-123")
    client = Client()
    client.force_login(admin)
    page = client.get("/projects/default/ledger/")
    assert "Verify now" in page.content.decode()
    answer = client.post("/ledger/verify/", {"next": "/projects/default/ledger/"}, follow=True)
    assert "The decision ledger verifies" in answer.content.decode()
    Entry.objects.filter(seq=2).update(actor="someone else")
    answer = client.post("/ledger/verify/", {"next": "/projects/default/ledger/"}, follow=True)
    assert "does not verify: altered: entry 2 was altered" in answer.content.decode()
