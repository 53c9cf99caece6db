"""Each project's own kill switch (issue 29), for its operators: pause new runs (the
queue holds) and stop all its runs; the global switch stays the site's. Every turn is
in the project's audit."""

from __future__ import annotations

from typing import Any

import pytest
from django.conf import settings
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse
from rest_framework.test import APIClient

from api.models import ApiToken
from core.errors import InputError
from projects.models import DEFAULT_PROJECT, AuditEntry, Project
from runs import project_queue as admission
from runs.control import ControlRefused, set_project_switch
from runs.models import Run
from runs.runtime import create_run
from tests.test_api import SCRIPT, SMALL_CONTRACT

pytestmark = pytest.mark.django_db


def start(user: User, project: str | None = None) -> Any:
    return create_run(SMALL_CONTRACT, SCRIPT, user, project=project, enqueue=False)


def signed_in(user: User) -> Client:
    client = Client(enforce_csrf_checks=True)
    client.force_login(user)
    client.get(reverse("control"))
    return client


def turn(client: Client, slug: str, action: str, **extra: str) -> Any:
    token = client.cookies[settings.CSRF_COOKIE_NAME].value if settings.CSRF_COOKIE_NAME in client.cookies else ""
    return client.post(reverse("project-switch", args=[slug]), {"action": action, "csrfmiddlewaretoken": token, **extra})


def test_it_lets_a_projects_operator_pause_new_runs_there_and_resume_them(
    other_member: User, other_project: Project, operator: User
) -> None:
    client = signed_in(other_member)
    assert "Stop all runs of elsewhere" in client.get(reverse("control")).content.decode()
    assert turn(client, "elsewhere", "pause").status_code == 302
    other_project.refresh_from_db()
    assert other_project.paused
    with pytest.raises(InputError, match="project elsewhere is paused"):
        start(other_member)
    token = ApiToken.issue(other_member)[1]
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Token {token}")
    refused = api.post("/api/runs/", {"contract": SMALL_CONTRACT, "proposer": SCRIPT}, format="json")
    assert refused.status_code == 409 and "paused" in refused.json()["detail"]
    assert start(operator).project.slug == DEFAULT_PROJECT, "another project is not paused"
    turn(client, "elsewhere", "resume")
    other_project.refresh_from_db()
    assert not other_project.paused and start(other_member).project == other_project
    entries = list(AuditEntry.objects.filter(project=other_project).order_by("at").values_list("action", "actor__username"))
    assert entries == [("project_paused", "mona-member"), ("project_resumed", "mona-member")]


def test_it_holds_the_queue_while_the_project_is_paused(other_member: User, other_project: Project) -> None:
    other_project.max_active_runs = 1
    other_project.save()
    first, second = start(other_member), start(other_member)
    assert second.queued
    set_project_switch(other_member, other_project, paused=True)
    Run.objects.filter(pk=first.pk).update(status="stopped", outcome="killed")
    from runs.scheduling.slots import run_ended

    run_ended(str(first.pk))
    assert admission.dispatch(other_project.pk) == [], "paused: the queue holds"
    set_project_switch(other_member, other_project, paused=False)
    assert admission.dispatch(other_project.pk) == [str(second.pk)]


def test_it_stops_all_runs_of_the_project_and_no_other(other_member: User, other_project: Project, operator: User) -> None:
    here = start(operator)
    there = [start(other_member), start(other_member)]
    client = signed_in(other_member)
    unconfirmed = turn(client, "elsewhere", "stop_all")
    assert unconfirmed.status_code == 302 and not Run.objects.filter(kill_requested=True).exists()
    turn(client, "elsewhere", "stop_all", confirm="on")
    assert set(Run.objects.filter(kill_requested=True).values_list("pk", flat=True)) == {r.pk for r in there}
    here.refresh_from_db()
    assert not here.kill_requested
    entry = AuditEntry.objects.get(project=other_project, action="project_stopped_all")
    assert entry.actor == other_member and entry.detail == {"killed": 2}


def test_it_refuses_a_projects_switch_to_everyone_but_its_operators(
    other_member: User, other_project: Project, operator: User, reviewer: User, admin_user: User
) -> None:
    assert turn(signed_in(operator), "elsewhere", "pause").status_code == 404, "another project's is as none"
    assert turn(signed_in(operator), "nowhere", "pause").status_code == 404
    assert turn(signed_in(other_member), DEFAULT_PROJECT, "pause").status_code == 404
    assert turn(signed_in(reviewer), DEFAULT_PROJECT, "pause").status_code == 403
    with pytest.raises(ControlRefused):
        set_project_switch(reviewer, Project.objects.get(slug=DEFAULT_PROJECT), paused=True)
    assert not Project.objects.filter(paused=True).exists()
    assert turn(signed_in(admin_user), "elsewhere", "pause").status_code == 302, "a site admin reaches every project"
    no_csrf = Client(enforce_csrf_checks=True)
    no_csrf.force_login(other_member)
    assert no_csrf.post(reverse("project-switch", args=["elsewhere"]), {"action": "resume"}).status_code == 403
