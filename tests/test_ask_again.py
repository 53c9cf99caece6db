"""Asking again for an out-of-date request: a reviewer or operator of the run's project
wakes a run still waiting on the call, which files a new request for where it is now;
an expired request (its run stops), a current one and another project's are refused."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse
from django.utils import timezone
from playwright.sync_api import BrowserContext, expect

from approvals.models import ApprovalRequest
from projects.models import Project
from runs.approval_flow.flow import expire_due, staleness_now
from runs.approval_flow.gate import DjangoApprovals
from runs.models import Run
from runs.services import drive_run
from tests.fixtures_web import SIZES, AsgiServer, Scene, screenshot, serious_problems, sign_in, waiting_scene
from tests.helpers import STARTABLE, new_policy_version


def stale_scene(operator: User) -> Scene:
    """A run waiting on a request a policy change has made out of date (its lapse not
    recorded yet: the wake-up that would have taken the run on was lost)."""
    scene = waiting_scene(operator)
    new_policy_version(approval_ttl_seconds=600)
    assert staleness_now(scene.request) == "the policy is now v2, the request was for v1"
    return scene


def signed_in(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


@pytest.mark.django_db
def test_it_asks_again_for_a_stale_request_and_the_run_files_a_new_one(
    operator: User, reviewer: User, resumes: list[str], django_capture_on_commit_callbacks: Any
) -> None:
    scene = stale_scene(operator)
    url = reverse("approvals:detail", args=[scene.request.pk])
    assert 'id="ask-again"' in signed_in(reviewer).get(url).content.decode()
    woken = len(resumes)
    with django_capture_on_commit_callbacks(execute=True):
        response = signed_in(reviewer).post(reverse("approvals:ask-again", args=[scene.request.pk]))
    assert response.status_code == 302 and response["Location"] == reverse("runs:detail", args=[scene.run.pk])
    assert resumes[woken:] == [str(scene.run.pk)]
    scene.request.refresh_from_db()
    assert scene.request.status == "stale"
    run = Run.objects.get(pk=scene.run.pk)
    drive_run(run, scene.world.environment(), DjangoApprovals(run))
    again = ApprovalRequest.objects.get(run=run, status="pending")
    assert again.call_id == scene.request.call_id and again.policy_version == scene.request.policy_version + 1
    page = signed_in(reviewer).get(url).content.decode()
    assert 'id="ask-again"' not in page and "the run has already asked again" in page
    assert reverse("approvals:detail", args=[again.pk]) in page


@pytest.mark.django_db
def test_it_refuses_to_ask_again_for_an_expired_or_current_request_or_anothers(
    operator: User, reviewer: User, other_member: User, other_project: Project, resumes: list[str]
) -> None:
    current = waiting_scene(operator)
    answer = signed_in(reviewer).post(reverse("approvals:ask-again", args=[current.request.pk]), follow=True).content.decode()
    assert "Not asked again: this request is still current" in answer
    assert signed_in(other_member).post(reverse("approvals:ask-again", args=[current.request.pk])).status_code == 404
    ApprovalRequest.objects.filter(pk=current.request.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    # Due but its lapse not recorded yet: already an expired request, not a current one.
    answer = signed_in(reviewer).post(reverse("approvals:ask-again", args=[current.request.pk]), follow=True).content.decode()
    assert "Not asked again: an expired request stops its run" in answer
    expire_due()
    woken = len(resumes)
    page = signed_in(reviewer).get(reverse("approvals:detail", args=[current.request.pk])).content.decode()
    assert "Cannot be asked again: an expired request stops its run" in page and 'id="ask-again"' not in page
    assert "the expiry ends the run's wait, and the run stops when it next resumes" in page and 'id="rerun-expired"' not in page
    answer = signed_in(reviewer).post(reverse("approvals:ask-again", args=[current.request.pk]), follow=True).content.decode()
    assert "Not asked again: an expired request stops its run" in answer
    assert len(resumes) == woken


@pytest.mark.django_db
def test_it_offers_a_re_run_for_an_expired_request_once_its_run_stopped(operator: User, reviewer: User) -> None:
    scene = waiting_scene(reviewer, contract=STARTABLE)
    ApprovalRequest.objects.filter(pk=scene.request.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    expire_due()
    run = Run.objects.get(pk=scene.run.pk)
    assert drive_run(run, scene.world.environment(), DjangoApprovals(run)).outcome == "approval_expired"
    url = reverse("approvals:detail", args=[scene.request.pk])
    page = signed_in(operator).get(url).content.decode()
    assert "This request can no longer be used: its run has stopped (approval expired)." in page
    assert 'id="rerun-expired"' in page and reverse("runs:rerun", args=[run.pk]) in page
    # A reviewer who is not an operator is told why no re-run is offered.
    page = signed_in(reviewer).get(url).content.decode()
    assert 'id="rerun-expired"' not in page and "Not offered a re-run: you are not an operator of this run&#x27;s project." in page
    response = signed_in(operator).post(reverse("runs:rerun", args=[run.pk]))
    again = Run.objects.get(rerun_of=run)
    assert response.status_code == 302 and response["Location"] == reverse("runs:detail", args=[again.pk])


@pytest.mark.browser
@pytest.mark.django_db(transaction=True)
def test_it_asks_again_from_the_approval_page_at_both_sizes(
    live_server_asgi: AsgiServer, context: BrowserContext, size: str, operator: User, reviewer: User, resumes: list[str]
) -> None:
    scene = stale_scene(operator)
    page = context.new_page()
    sign_in(page, live_server_asgi, reviewer.username)
    page.goto(f"{live_server_asgi.url}/approvals/{scene.request.pk}/")
    expect(page.locator("#revision-panel")).to_contain_text("out of date")
    screenshot(page, f"ask_again_{size}")
    problems = serious_problems(page, "stale request", SIZES[size]["width"])
    page.locator("#ask-again").click()
    page.wait_for_url(f"**/runs/{scene.run.pk}/")
    expect(page.locator(".flash")).to_contain_text("Asked again")
    assert not problems, "\n".join(problems)


@pytest.mark.browser
@pytest.mark.django_db(transaction=True)
def test_it_re_runs_from_an_expired_request_at_both_sizes(
    live_server_asgi: AsgiServer, context: BrowserContext, size: str, operator: User, reviewer: User
) -> None:
    scene = waiting_scene(reviewer, contract=STARTABLE)
    ApprovalRequest.objects.filter(pk=scene.request.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    expire_due()
    run = Run.objects.get(pk=scene.run.pk)
    drive_run(run, scene.world.environment(), DjangoApprovals(run))
    page = context.new_page()
    sign_in(page, live_server_asgi, operator.username)
    page.goto(f"{live_server_asgi.url}/approvals/{scene.request.pk}/")
    expect(page.locator("#expired-use")).to_contain_text("can no longer be used: its run has stopped (approval expired)")
    problems = serious_problems(page, "expired request", SIZES[size]["width"])
    page.locator("#rerun-expired").click()
    page.wait_for_url("**/runs/*/")
    again = Run.objects.get(rerun_of=run)
    assert page.url.endswith(f"/runs/{again.pk}/")
    assert not problems, "\n".join(problems)
