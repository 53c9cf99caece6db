"""Webhooks per project (issue 29): an endpoint of a project hears its runs alone, a
site-wide one every run; a project's admins manage its endpoints in the admin and see
nothing of another project's or the site-wide ones; every change is audited."""

from __future__ import annotations

import json

import pytest
from django.contrib.auth.models import User
from django.test import Client
from pytest_django import Settings

from notifications.models import Delivery, WebhookEndpoint
from projects.models import DEFAULT_PROJECT, AuditEntry, Membership, Project, Role
from runs.approval_flow.gate import DjangoApprovals
from runs.models import Run
from runs.services import drive_run
from tests.fixtures_services import Worker
from tests.helpers import World
from tests.test_webhooks import Receiver, receiver, wait_for_delivery, worker  # noqa: F401 - the fixtures, found by name

ADD = "/admin/notifications/webhookendpoint/add/"


def hook(url: str, project: Project | None, name: str) -> WebhookEndpoint:
    return WebhookEndpoint.objects.create(name=name, url=url, event_kinds=["approval_requested"], project=project)


def waiting_in(starter: User, project: Project | None = None) -> Run:
    world = World()
    run = world.create(actor=starter)
    if project is not None:
        Run.objects.filter(pk=run.pk).update(project=project)
        run.refresh_from_db()
    drive_run(run, world.environment(), DjangoApprovals(run))
    return run


def project_admin(user: User, project: Project) -> User:
    """``user`` made an admin of ``project`` alone (which lets them into the Django admin)."""
    Membership.objects.create(project=project, user=user, role=Role.ADMIN)
    return user


@pytest.mark.celery
def test_it_sends_a_projects_endpoint_its_projects_events_and_not_anothers(
    worker: Worker,  # noqa: F811 - the fixture imported above
    receiver: Receiver,  # noqa: F811 - the fixture imported above
    operator: User,
    other_member: User,
    other_project: Project,
) -> None:
    default = Project.objects.get(slug=DEFAULT_PROJECT)
    here, there, everywhere = (
        hook(receiver.url, default, "here"),
        hook(receiver.url, other_project, "there"),
        hook(receiver.url, None, "all"),
    )
    run_here = waiting_in(operator)
    run_there = waiting_in(other_member, other_project)
    requests = receiver.wait_for(4)
    heard: dict[str, set[str]] = {}
    for request in requests:
        endpoint = Delivery.objects.get(pk=request.headers["X-Harness-Delivery"]).endpoint
        heard.setdefault(endpoint.name, set()).add(json.loads(request.body)["run"]["id"])
    assert heard == {"here": {str(run_here.pk)}, "there": {str(run_there.pk)}, "all": {str(run_here.pk), str(run_there.pk)}}
    for endpoint in (here, there):
        assert wait_for_delivery({"endpoint": endpoint}, "delivered", worker).event.run_id in (run_here.pk, run_there.pk)
    assert Delivery.objects.filter(endpoint=everywhere).count() == 2 and Delivery.objects.count() == 4
    assert len(receiver.requests) == 4


def test_it_records_deliveries_only_for_the_runs_project_and_site_wide_endpoints(
    operator: User, other_member: User, other_project: Project
) -> None:
    hook("http://127.0.0.1:9/hook", other_project, "there")
    everywhere = hook("http://127.0.0.1:9/hook", None, "all")
    waiting_in(operator)
    assert list(Delivery.objects.values_list("endpoint", flat=True)) == [everywhere.pk]


def test_it_shows_a_project_admin_their_projects_endpoints_alone(
    outsider: User, admin_user: User, other_member: User, other_project: Project, settings: Settings
) -> None:
    settings.HARNESS_WEBHOOK_ALLOWED_HOSTS = ["127.0.0.1"]
    default = Project.objects.get(slug=DEFAULT_PROJECT)
    theirs = hook("http://127.0.0.1:9/theirs", other_project, "theirs-hook")
    hook("http://127.0.0.1:9/default", default, "default-hook")
    site_wide = hook("http://127.0.0.1:9/all", None, "site-wide-hook")
    client = Client()
    client.force_login(project_admin(outsider, other_project))
    listing = client.get("/admin/notifications/webhookendpoint/").content.decode()
    assert "theirs-hook" in listing and "default-hook" not in listing and "site-wide-hook" not in listing
    form = client.get(ADD).content.decode()
    assert f'value="{other_project.pk}"' in form and f'value="{default.pk}"' not in form
    # Another project's endpoint, or a site-wide one, is as absent as one that does not exist.
    assert client.get(f"/admin/notifications/webhookendpoint/{site_wide.pk}/change/").status_code == 302
    assert client.post(f"/admin/notifications/webhookendpoint/{site_wide.pk}/delete/", {"post": "yes"}).status_code == 302
    assert WebhookEndpoint.objects.filter(pk=site_wide.pk).exists()
    fields = {
        "name": "new",
        "url": "http://127.0.0.1:9/new",
        "format": "json",
        "event_kinds": ["run_stopped"],
        "secret": "s" * 32,
        "active": "on",
    }
    for project in ("", default.pk):
        refused = client.post(ADD, {**fields, "project": project})
        assert refused.status_code == 200 and "project" in refused.context["adminform"].form.errors, project
    assert not WebhookEndpoint.objects.filter(name="new").exists()
    assert client.post(ADD, {**fields, "project": other_project.pk}).status_code == 302
    assert WebhookEndpoint.objects.get(name="new").project == other_project
    # Site admins see, and may make, every kind.
    admin = Client()
    admin.force_login(admin_user)
    everything = admin.get("/admin/notifications/webhookendpoint/").content.decode()
    assert all(name in everything for name in ("theirs-hook", "default-hook", "site-wide-hook", "new"))
    assert admin.post(ADD, {**fields, "name": "global", "project": ""}).status_code == 302
    assert WebhookEndpoint.objects.get(name="global").project is None
    del theirs


def test_it_audits_every_endpoint_created_changed_and_deleted(outsider: User, other_project: Project, settings: Settings) -> None:
    settings.HARNESS_WEBHOOK_ALLOWED_HOSTS = ["127.0.0.1"]
    user = project_admin(outsider, other_project)
    client = Client()
    client.force_login(user)
    fields = {
        "name": "ci",
        "project": other_project.pk,
        "url": "http://127.0.0.1:9/a?token=x",
        "format": "json",
        "event_kinds": ["run_stopped"],
    }
    assert client.post(ADD, {**fields, "secret": "s" * 32, "active": "on"}).status_code == 302
    endpoint = WebhookEndpoint.objects.get(name="ci")
    change = f"/admin/notifications/webhookendpoint/{endpoint.pk}/change/"
    assert client.post(change, {**fields, "url": "http://127.0.0.1:9/b", "secret": "t" * 32}).status_code == 302
    assert client.post(f"/admin/notifications/webhookendpoint/{endpoint.pk}/delete/", {"post": "yes"}).status_code == 302
    entries = list(AuditEntry.objects.filter(action__startswith="webhook_").order_by("at", "pk"))
    assert [(e.action, e.project, e.actor) for e in entries] == [
        ("webhook_created", other_project, user),
        ("webhook_changed", other_project, user),
        ("webhook_deleted", other_project, user),
    ]
    assert entries[0].detail["destination"] == "http://127.0.0.1:9" and entries[0].detail["event_kinds"] == ["run_stopped"]
    assert entries[1].detail == {"name": "ci", "active": [True, False], "secret": "replaced"}
    assert "token=x" not in json.dumps([e.detail for e in entries]) and "s" * 32 not in json.dumps([e.detail for e in entries])


def test_it_shows_a_project_admin_their_endpoints_deliveries_alone(
    operator: User, outsider: User, other_member: User, other_project: Project
) -> None:
    theirs = hook("http://127.0.0.1:9/theirs", other_project, "theirs-hook")
    everywhere = hook("http://127.0.0.1:9/all", None, "site-wide-hook")
    waiting_in(other_member, other_project)
    mine, site_wide = Delivery.objects.get(endpoint=theirs), Delivery.objects.get(endpoint=everywhere)
    client = Client()
    client.force_login(project_admin(outsider, other_project))
    listing = client.get("/admin/notifications/delivery/").content.decode()
    assert str(mine.pk) in listing and str(site_wide.pk) not in listing and "site-wide-hook" not in listing
    assert client.get(f"/admin/notifications/delivery/{mine.pk}/change/").status_code == 200
    assert client.get(f"/admin/notifications/delivery/{site_wide.pk}/change/").status_code == 302
