"""An ended run's result page: the outcome in words, the model's summary as its words
(escaped), what changed with the diff, where it went, who approved what and when, the
evidence, what was not performed, limitations, cost and time, and the JSON report
beside it; in a real browser at a laptop's and a phone's width, axe clean."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse
from playwright.sync_api import BrowserContext, expect

from core.scenarios import FIXED, call
from projects.models import Project
from runs.approval_flow.flow import grant
from runs.approval_flow.gate import DjangoApprovals
from runs.models import Run
from runs.services import drive_run
from tests.fixtures_web import SIZES, AsgiServer, Scene, screenshot, serious_problems, sign_in, waiting_scene

SUMMARY = "Rejected <b>negative</b> quantities & added a test."
SCRIPT = [
    call("read_file", path="src/calc.py"),
    call("write_file", path="src/calc.py", content=FIXED),
    call("run_check", check_id="tests"),
    call("publish", message="reject negative quantities"),
    call("finish", summary=SUMMARY),
]


def ended_scene(operator: User, reviewer: User, project_id: int | None = None) -> Scene:
    """A run whose publish a reviewer granted, driven here to its end (``resumes``)."""
    scene = waiting_scene(operator, SCRIPT, project_id=project_id)
    grant(scene.request, reviewer, "checked the guard")
    scene.run.refresh_from_db()
    state = drive_run(scene.run, scene.world.environment(), DjangoApprovals(scene.run))
    assert state.status == "complete", state.outcome
    scene.run.refresh_from_db()
    return scene


def signed_in(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


@pytest.mark.django_db
def test_it_shows_what_an_ended_run_did_and_the_models_words_escaped(operator: User, reviewer: User, resumes: list[str]) -> None:
    scene = ended_scene(operator, reviewer)
    page = signed_in(reviewer).get(reverse("runs:result", args=[scene.run.pk])).content.decode()
    assert "Completed: finished with passing checks on the current revision." in page
    assert "Rejected &lt;b&gt;negative&lt;/b&gt; quantities &amp; added a test." in page and "<b>negative" not in page
    assert '<span class="mono">src/calc.py</span>' in page and "# publish of 1 file(s)" in page  # the simulated publish's diff
    assert f"granted by <strong>{reviewer.username}</strong>" in page and "checked the guard" in page
    assert "tests passed on" in page and "Every required check passed on the final revision" in page
    assert reverse("runs:report", args=[scene.run.pk]) in page
    assert "none: every call admitted was performed" in page
    # The simulated executor records no destination: the page names the effect, not "nowhere".
    assert "applied an effect outside the workspace" in page and "Nowhere: nothing was published." not in page
    # The run page links to it once the run has ended.
    run_page = signed_in(operator).get(reverse("runs:detail", args=[scene.run.pk])).content.decode()
    assert f'href="{reverse("runs:result", args=[scene.run.pk])}"' in run_page


@pytest.mark.django_db
def test_it_has_no_result_for_a_live_run_nor_for_another_projects(
    operator: User, reviewer: User, other_member: User, other_project: Project, resumes: list[str]
) -> None:
    waiting = waiting_scene(operator)
    assert signed_in(reviewer).get(reverse("runs:result", args=[waiting.run.pk])).status_code == 404
    ended = ended_scene(operator, reviewer)
    assert signed_in(other_member).get(reverse("runs:result", args=[ended.run.pk])).status_code == 404
    assert signed_in(reviewer).get(reverse("runs:result", args=[ended.run.pk])).status_code == 200


@pytest.mark.django_db
def test_it_says_a_stopped_run_stopped_and_what_it_left_undone(operator: User, reviewer: User) -> None:
    from runs.approval_flow.flow import deny

    scene = waiting_scene(operator, SCRIPT)
    deny(scene.request, reviewer, "release freeze")
    run = Run.objects.get(pk=scene.run.pk)
    drive_run(run, scene.world.environment(), DjangoApprovals(run))
    page = signed_in(operator).get(reverse("runs:result", args=[run.pk])).content.decode()
    assert "Stopped: denied (approval denied: release freeze)." in page
    assert "The run did not complete: denied" in page
    assert "Nowhere: nothing was published." in page


@pytest.mark.browser
@pytest.mark.django_db(transaction=True)
def test_it_shows_the_result_at_both_sizes_axe_clean(
    live_server_asgi: AsgiServer, context: BrowserContext, size: str, operator: User, reviewer: User, resumes: list[str]
) -> None:
    scene = ended_scene(operator, reviewer)
    page = context.new_page()
    sign_in(page, live_server_asgi, operator.username)
    page.goto(f"{live_server_asgi.url}/runs/{scene.run.pk}/")
    page.locator('[data-field="result"]').click()
    expect(page.locator("#outcome-sentence")).to_contain_text("Completed: finished with passing checks")
    expect(page.locator("#model-summary")).to_contain_text(SUMMARY)
    expect(page.locator("#changed-files")).to_contain_text("src/calc.py")
    expect(page.locator("#result-decisions")).to_contain_text(reviewer.username)
    screenshot(page, f"result_{size}")
    problems = serious_problems(page, "result", SIZES[size]["width"])
    assert not problems, "\n".join(problems)


@pytest.mark.django_db
def test_it_expands_the_shown_diff_from_the_request_that_carried_it(operator: User, reviewer: User, resumes: list[str]) -> None:
    from approvals.models import ApprovalRequest

    scene = ended_scene(operator, reviewer)
    diff = "--- a/src/calc.py\n+++ b/src/calc.py\n@@ -2 +2 @@\n-    return q\n+    return abs(q)\n"
    ApprovalRequest.objects.filter(pk=scene.request.pk).update(diff=diff, sources={"src/calc.py": "def total(q):\n    return q\n"})
    page = signed_in(reviewer).get(reverse("runs:result", args=[scene.run.pk])).content.decode()
    assert f'data-context-url="{reverse("approvals:context", args=[scene.request.pk])}"' in page
    assert page.count('class="d-expand"') == 2 and "js/diff_context.js" in page  # line 1, in both layouts
