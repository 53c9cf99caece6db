"""Re-running an ended run: an operator of its project starts a new run with the same
contract, proposer and project, linked to the old, under the project's current policy
(said when it changed since); the server refuses anyone else and a run still going."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse
from playwright.sync_api import BrowserContext, expect

from projects.models import Project
from runs.approval_flow.flow import deny
from runs.approval_flow.gate import DjangoApprovals
from runs.models import Run
from runs.services import drive_run
from tests.fixtures_web import SIZES, AsgiServer, Scene, screenshot, serious_problems, sign_in, waiting_scene
from tests.helpers import STARTABLE, new_policy_version


def denied_scene(operator: User, reviewer: User) -> Scene:
    """A run stopped by a reviewer's denial."""
    scene = waiting_scene(operator, contract=STARTABLE)
    deny(scene.request, reviewer, "not this week")
    drive_run(Run.objects.get(pk=scene.run.pk), scene.world.environment(), DjangoApprovals(scene.run))
    scene.run.refresh_from_db()
    assert scene.run.status == "stopped"
    return scene


def signed_in(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


@pytest.mark.django_db
def test_it_reruns_an_ended_run_with_the_same_contract_and_policy_linked_to_the_old(operator: User, reviewer: User) -> None:
    old = denied_scene(operator, reviewer).run
    response = signed_in(operator).post(reverse("runs:rerun", args=[old.pk]))
    new = Run.objects.exclude(pk=old.pk).get()
    assert response.status_code == 302 and response["Location"] == reverse("runs:detail", args=[new.pk])
    assert (new.contract, new.proposer, new.project_id, new.policy_id) == (old.contract, old.proposer, old.project_id, old.policy_id)
    assert new.rerun_of_id == old.pk and new.created_by == operator
    page = signed_in(operator).get(reverse("runs:detail", args=[new.pk])).content.decode()
    assert "A re-run of" in page and str(old.pk)[:8] in page
    assert str(new.pk)[:8] in signed_in(operator).get(reverse("runs:result", args=[old.pk])).content.decode()


@pytest.mark.django_db
def test_it_refuses_a_rerun_to_others_and_to_a_live_run(operator: User, reviewer: User, other_member: User, other_project: Project) -> None:
    old = denied_scene(operator, reviewer).run
    assert signed_in(reviewer).post(reverse("runs:rerun", args=[old.pk])).status_code == 403
    assert signed_in(other_member).post(reverse("runs:rerun", args=[old.pk])).status_code in (403, 404)
    live = waiting_scene(operator).run
    page = signed_in(operator).post(reverse("runs:rerun", args=[live.pk]), follow=True).content.decode()
    assert "Not re-run: calc-fix is still waiting" in page
    assert Run.objects.count() == 2  # the old run and the live one: nothing was started


@pytest.mark.django_db
def test_it_reruns_after_a_policy_change_under_the_current_policy_saying_so(operator: User, reviewer: User) -> None:
    old = denied_scene(operator, reviewer).run
    current = new_policy_version(approval_ttl_seconds=600)
    result = signed_in(operator).get(reverse("runs:result", args=[old.pk])).content.decode()
    offer = f"under policy v{current.version}, the project&#x27;s current (this run had v{old.policy.version})"
    assert offer in result and offer in signed_in(operator).get(reverse("runs:detail", args=[old.pk])).content.decode()
    page = signed_in(operator).post(reverse("runs:rerun", args=[old.pk]), follow=True).content.decode()
    new = Run.objects.get(rerun_of=old)
    assert new.policy_id == current.pk != old.policy_id
    assert f"Re-running calc-fix with the same contract under policy v{current.version}, the project&#x27;s current" in page


@pytest.mark.browser
@pytest.mark.django_db(transaction=True)
def test_it_reruns_from_the_result_page_at_both_sizes(
    live_server_asgi: AsgiServer, context: BrowserContext, size: str, operator: User, reviewer: User
) -> None:
    old = denied_scene(operator, reviewer).run
    page = context.new_page()
    sign_in(page, live_server_asgi, operator.username)
    page.goto(f"{live_server_asgi.url}/runs/{old.pk}/result/")
    expect(page.locator("#outcome-sentence")).to_contain_text("not this week")
    problems = serious_problems(page, "stopped result", SIZES[size]["width"])
    page.locator("#rerun").click()
    expect(page.locator("#lineage")).to_contain_text("A re-run of")
    expect(page.locator(".flash")).to_contain_text("Re-running calc-fix")
    new = Run.objects.get(rerun_of=old)
    assert page.url.endswith(f"/runs/{new.pk}/")
    screenshot(page, f"rerun_{size}")
    problems += serious_problems(page, "re-run", SIZES[size]["width"])
    assert not problems, "\n".join(problems)
