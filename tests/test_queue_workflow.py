"""A reviewer's queue and an operator's list: the inbox filtered and sorted in the URL
with a count of what is shown and left, the next request offered after a decision,
and the runs list with a duration and status filters that work (``?status=waiting``)
or are named when they cannot; in a real browser at both widths, axe clean."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse
from django.utils import timezone
from playwright.sync_api import BrowserContext, expect

from approvals.models import ApprovalRequest
from projects.models import Membership, Project, Role
from runs.approval_flow.flow import deny
from tests.fixtures_web import SIZES, AsgiServer, screenshot, serious_problems, sign_in, waiting_scene


def signed_in(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


@pytest.mark.django_db
def test_it_filters_the_runs_list_by_a_status_in_the_url_and_names_a_bad_one(operator: User, reviewer: User) -> None:
    waiting = waiting_scene(operator)
    stopped = waiting_scene(operator)
    deny(stopped.request, reviewer, "no")
    stopped.run.refresh_from_db()
    from runs.approval_flow.gate import DjangoApprovals
    from runs.services import drive_run

    drive_run(stopped.run, stopped.world.environment(), DjangoApprovals(stopped.run))
    client = signed_in(operator)
    page = client.get(reverse("runs:list") + "?status=waiting").content.decode()
    assert str(waiting.run.pk)[:8] in page and str(stopped.run.pk)[:8] not in page
    assert 'data-label="Duration"' in page
    page = client.get(reverse("runs:list") + "?status=nope&q=calc").content.decode()
    assert "Not applied: status: no status &#x27;nope&#x27;" in page
    assert str(waiting.run.pk)[:8] in page and str(stopped.run.pk)[:8] in page  # the search still applies


@pytest.mark.django_db
def test_it_filters_and_sorts_the_inbox_and_offers_the_next_request(operator: User, reviewer: User, other_project: Project) -> None:
    Membership.objects.create(project=other_project, user=reviewer, role=Role.REVIEWER)
    first, second = waiting_scene(operator), waiting_scene(operator)
    there = waiting_scene(operator, project_id=other_project.pk)
    ApprovalRequest.objects.filter(pk=second.request.pk).update(expires_at=timezone.now() + timedelta(minutes=5))
    client = signed_in(reviewer)
    page = client.get(reverse("approvals:inbox") + f"?project={other_project.slug}").content.decode()
    assert "1 shown of 3 waiting" in page and str(there.request.pk) in page and str(first.request.pk) not in page
    page = client.get(reverse("approvals:inbox") + "?project=default&sort=expiry").content.decode()
    assert page.index(str(second.request.pk)) < page.index(str(first.request.pk))
    page = client.get(reverse("approvals:inbox") + f"?run={str(first.run.pk)[:8]}").content.decode()
    assert "1 shown of 3 waiting" in page and str(first.request.pk) in page

    # The queue last chosen (the default project, soonest to expire) is walked after a decision.
    client.get(reverse("approvals:inbox") + "?project=default&sort=expiry")
    landed = client.post(reverse("approvals:deny", args=[second.request.pk]), {"reason": "not now"}, follow=True).content.decode()
    assert f'href="{reverse("approvals:detail", args=[first.request.pk])}"' in landed and "1 left in your queue" in landed
    landed = client.post(reverse("approvals:deny", args=[first.request.pk]), {"reason": "not now"}, follow=True).content.decode()
    assert "Your queue is empty" in landed


@pytest.mark.browser
@pytest.mark.django_db(transaction=True)
def test_it_walks_the_queue_from_the_inbox_at_both_sizes(
    live_server_asgi: AsgiServer, context: BrowserContext, size: str, operator: User, reviewer: User
) -> None:
    first, second = waiting_scene(operator), waiting_scene(operator)
    page = context.new_page()
    sign_in(page, live_server_asgi, reviewer.username)
    page.goto(f"{live_server_asgi.url}/approvals/?tool=publish&sort=newest")
    expect(page.locator("#inbox-count")).to_have_text("2 waiting")
    expect(page.locator("#inbox-filters select[name=sort]")).to_have_value("newest")
    screenshot(page, f"inbox_filters_{size}")
    problems = serious_problems(page, "inbox", SIZES[size]["width"])
    page.locator(f'#inbox-rows tr[data-request="{second.request.pk}"]').get_by_role("link", name="Review publish").click()
    page.fill("#id_reason", "not this one")
    page.click("#deny")
    page.wait_for_url(f"**/runs/{second.run.pk}/")
    expect(page.locator("#next-request")).to_contain_text("1 left in your queue")
    problems += serious_problems(page, "run after a decision", SIZES[size]["width"])
    page.locator("#next-request a").click()
    page.wait_for_url(f"**/approvals/{first.request.pk}/")
    assert not problems, "\n".join(problems)
