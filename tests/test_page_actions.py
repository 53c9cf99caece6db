"""The pages' actions and what they answer: the two clocks, the global switch at the
New run form, actions that must not resubmit or mislead, each role's landing page, a
check's output, and forms that name every problem in words."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from live.trace import present
from runs.approval_flow.flow import deny
from runs.control import set_global
from runs.models import Run
from tests.fixtures_web import waiting_scene


def signed_in(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


@pytest.mark.django_db
def test_it_shows_both_clocks_on_the_approval_and_run_pages(operator: User, reviewer: User) -> None:
    scene = waiting_scene(operator)
    for client, url in (
        (signed_in(reviewer), reverse("approvals:detail", args=[scene.request.pk])),
        (signed_in(operator), reverse("runs:detail", args=[scene.run.pk])),
    ):
        page = client.get(url).content.decode()
        # Waiting for a reviewer: the waiting clock runs, the working clock stands still.
        assert 'data-field="waited"' in page and 'data-field="working"' in page, url
        assert page.count('data-clock-ticks="1"') == 1 and 'data-field="waited" data-clock-seconds' in page, url
        waited = page.split('data-field="waited"', 1)[1]
        assert waited.split(">", 1)[0].endswith('data-clock-ticks="1"'), url


@pytest.mark.django_db
def test_it_refuses_a_new_run_at_the_form_while_every_run_is_stopped(admin_user: User) -> None:
    set_global(admin_user, stop_all=True, admit_new=True)
    client = signed_in(admin_user)
    page = client.get(reverse("runs:new"))
    assert "Stop all runs is on." in page.content.decode()
    response = client.post(reverse("runs:new"), {"template": "demo", "contract": "", "proposer_kind": "scripted", "proposer_options": ""})
    text = response.content.decode()
    assert response.status_code == 400 and "would be killed at once" in text and "(run)" not in text
    assert not Run.objects.exists()


@pytest.mark.django_db
def test_it_names_the_switch_it_turned_and_who_turned_it(operator: User) -> None:
    client = signed_in(operator)
    assert "Never changed" in client.get(reverse("control")).content.decode()
    page = client.post(reverse("control"), {"action": "pause_admission"}, follow=True).content.decode()
    assert "New runs are paused: runs already going continue." in page
    assert f"Last changed by {operator.username}" in page and "New runs are paused.</strong>" in page


@pytest.mark.django_db(transaction=True)
def test_it_answers_a_refused_grant_with_a_page_a_reload_does_not_resubmit(operator: User, reviewer: User) -> None:
    scene = waiting_scene(operator)
    deny(scene.request, reviewer, "no")
    client = signed_in(reviewer)
    response = client.post(reverse("approvals:grant", args=[scene.request.pk]))
    assert response.status_code == 302 and response["Location"] == reverse("approvals:detail", args=[scene.request.pk])
    page = client.get(response["Location"]).content.decode()
    assert "this request is already denied" in page and f"Denied by <strong>{reviewer.username}</strong>" in page


@pytest.mark.django_db
def test_it_lands_each_role_on_its_own_page(reviewer: User, operator: User) -> None:
    assert signed_in(reviewer).get("/")["Location"] == reverse("approvals:inbox")
    assert signed_in(operator).get("/")["Location"] == reverse("runs:list")


@pytest.mark.django_db(transaction=True)
def test_it_shows_a_checks_output_with_line_numbers_and_what_produced_it(operator: User) -> None:
    from runs.models import Evidence
    from runs.persistence.artifacts import ArtifactStorage

    scene = waiting_scene(operator)
    evidence = Evidence.objects.filter(run=scene.run).first()
    assert evidence is not None
    evidence.output_ref = ArtifactStorage().put(b"collected 3 items\n3 passed\n", "text/plain")
    evidence.save()
    page = signed_in(operator).get(reverse("runs:artifact", args=[scene.run.pk, evidence.output_ref])).content.decode()
    assert f"Output of check {evidence.check_id}" in page and f"exit code {evidence.exit_code}" in page
    assert evidence.revision[:12] in page and 'id="L1"' in page and 'href="#end"' in page and 'id="output-filter"' in page


@pytest.mark.django_db(transaction=True)
def test_it_keeps_an_optional_comment_on_a_grant_and_reason_on_a_kill(operator: User, reviewer: User) -> None:
    from approvals.models import ApprovalRequest
    from runs.models import Event

    granted, killed = waiting_scene(operator), waiting_scene(operator)
    signed_in(reviewer).post(reverse("approvals:grant", args=[granted.request.pk]), {"comment": "  checked with the team  "})
    assert ApprovalRequest.objects.get(pk=granted.request.pk).reason == "checked with the team"
    decided = Event.objects.get(run=granted.run, type="approval_decided").as_dict()
    assert present(decided)["view"]["summary"] == "checked with the team"

    signed_in(operator).post(reverse("runs:kill", args=[killed.run.pk]), {"reason": "wrong repository"})
    event = present(Event.objects.get(run=killed.run, type="kill_requested").as_dict())
    assert event["view"]["summary"] == f"by {operator.username} for this run: wrong repository"
    # The stop says who and why too, wherever the run's end is told.
    from runs.approval_flow.gate import DjangoApprovals
    from runs.services import drive_run
    from tests.helpers import KillFlag

    drive_run(
        Run.objects.get(pk=killed.run.pk), killed.world.environment(), DjangoApprovals(killed.run), controls=KillFlag(str(killed.run.pk))
    )
    said = f"killed by {operator.username}: wrong repository"
    stopped = present(Event.objects.get(run=killed.run, type="stopped").as_dict())
    assert said in stopped["payload"]["said"] and said in stopped["view"]["summary"], stopped
    for page in ("runs:detail", "runs:result"):
        assert said in signed_in(operator).get(reverse(page, args=[killed.run.pk])).content.decode(), page
    api = signed_in(operator).get(f"/api/runs/{killed.run.pk}/").json()
    assert api["outcome"] == "killed" and said in api["said"], api


@pytest.mark.django_db(transaction=True)
def test_it_rounds_the_working_clock_and_the_time_budget_alike(operator: User, reviewer: User) -> None:
    from datetime import UTC, datetime

    from pages.summary import run_summary
    from runs.approval_flow.flow import grant
    from runs.approval_flow.gate import DjangoApprovals
    from runs.persistence.store import load_state
    from runs.services import drive_run

    scene = waiting_scene(operator)
    grant(scene.request, reviewer)
    drive_run(scene.run, scene.world.environment(), DjangoApprovals(scene.run))
    state = load_state(Run.objects.get(pk=scene.run.pk))
    # 4.6 s of work: a clock that rounds down says 4s, a budget that rounds to nearest 5s.
    finished = datetime.fromtimestamp(state.started_at + state.waited_seconds + 4.6, UTC)
    Run.objects.filter(pk=scene.run.pk).update(updated_at=finished)
    summary = run_summary(Run.objects.get(pk=scene.run.pk))
    time_budget = next(b for b in summary["budgets"] if b["name"] == "time")
    assert summary["working_seconds"] == 4.6 and time_budget["used"] == 4 and time_budget["clock"] == "working"
    page = signed_in(operator).get(reverse("runs:detail", args=[scene.run.pk])).content.decode()
    assert 'data-clock-seconds="4.6">4s</span>' in page and ">4s / 600s</span>" in page


@pytest.mark.django_db
def test_it_says_what_is_wrong_with_a_new_run_in_words_naming_each_field(admin_user: User) -> None:
    form = {"template": "", "proposer_kind": "scripted", "proposer_options": ""}
    contract = (
        '{"task_id": "bad id!", "objective": "", "acceptance_criteria": "tests", "limits": {"max_proposals": 0, "max_attempts": "3"}}'
    )
    page = signed_in(admin_user).post(reverse("runs:new"), {**form, "contract": contract}).content.decode()
    for said in (
        "task_id: must be 1 to 100 letters, digits, &#x27;.&#x27;, &#x27;_&#x27; or &#x27;-&#x27;, starting with a letter or digit",
        "objective: must not be empty",
        "acceptance_criteria: must be a list (a JSON array)",
        "workspace: required",
        "limits.max_proposals: must be at least 1",
        "limits.max_attempts: must be a whole number",
        "script: required: the scripted proposer plays a JSON list of proposals",
    ):
        assert said in page
    for raw in ("(root)", "Field required", "Input should", "String should", "contract.task_id", "char "):
        assert raw not in page, raw
    page = signed_in(admin_user).post(reverse("runs:new"), {**form, "contract": '{"task_id": '}).content.decode()
    assert "not valid JSON: expecting value at line 1, column 12" in page and "(root)" not in page


@pytest.mark.django_db
def test_it_says_which_sign_in_box_is_empty(reviewer: User) -> None:
    page = Client().post(reverse("login"), {"username": reviewer.username, "password": ""}).content.decode()
    assert "Fill in your password." in page
    page = Client().post(reverse("login"), {"username": "", "password": ""}).content.decode()
    assert "Fill in your username and password." in page


@pytest.mark.django_db
def test_it_names_the_field_of_every_problem_in_the_policy_editor(admin_user: User) -> None:
    from approvals.policies import current_policy_row
    from approvals.policy_editor import initial_data

    main, rules, checks = initial_data(current_policy_row().document)
    data = {key: "" if value is None else value for key, value in main.items()}
    data.update(approval_ttl_seconds=0, sandbox_memory="lots", note="bad")
    data["allow_self_approval"] = ""
    for prefix, rows in (("rules", rules), ("checks", checks)):
        data.update(
            {
                f"{prefix}-TOTAL_FORMS": len(rows),
                f"{prefix}-INITIAL_FORMS": 0,
                f"{prefix}-MIN_NUM_FORMS": 0,
                f"{prefix}-MAX_NUM_FORMS": 1000,
            }
        )
        for index, row in enumerate(rows):
            for name, value in row.items():
                if value is not False:
                    data[f"{prefix}-{index}-{name}"] = value
            if prefix == "rules":
                data[f"{prefix}-{index}-ORDER"] = index + 1
    data["rules-0-name"] = ""
    data["checks-0-check_id"] = "Bad ID!"
    client = signed_in(admin_user)
    response = client.post(reverse("admin:approvals_policyversion_add"), data)
    page = response.content.decode()
    assert response.status_code == 200 and 'id="policy-problems"' in page
    for said in (
        "Approval TTL (seconds): must be at least 1",
        "Sandbox memory: must be a number followed by k, m or g (for example 512m or 2g)",
        "Rule row 1, name: must not be empty",
        "Check row 1, check id: must be 1 to 64 lowercase letters",
    ):
        assert said in page, said
    for raw in ("String should", "Input should", "pattern &#x27;"):
        assert raw not in page, raw
    refused = client.post(
        f"{reverse('admin:approvals_policyversion_add')}?json=1", {"note": "", "document_text": '{"rules": ['}
    ).content.decode()
    assert "not valid JSON: expecting value at line 1, column 12" in refused


@pytest.mark.django_db
def test_it_lets_the_keyboard_reach_every_scrollable_block_of_arguments_and_events(operator: User, reviewer: User) -> None:
    import re

    scene = waiting_scene(operator)
    for client, url in (
        (signed_in(reviewer), reverse("approvals:detail", args=[scene.request.pk])),
        (signed_in(operator), reverse("runs:detail", args=[scene.run.pk])),
    ):
        page = client.get(url).content.decode()
        blocks = re.findall(r"<pre[^>]*>", page)
        assert blocks, url
        for block in blocks:
            # axe's scrollable-region-focusable: a block that may scroll takes the focus and has a name.
            assert 'tabindex="0"' in block and 'role="region"' in block and "aria-label=" in block, (url, block)


@pytest.mark.django_db
def test_it_names_the_base_revision_or_says_why_there_is_none(operator: User, admin_user: User) -> None:
    from pages.summary import base_note, run_summary
    from runs.runtime import create_run
    from tests.helpers import STARTABLE

    # Created by the web process: its workspace is prepared by a worker, later.
    fresh = create_run(STARTABLE, {"kind": "scripted", "script": []}, admin_user)
    summary = run_summary(fresh)
    assert (summary["base_revision"], summary["base_note"]) == ("", "no workspace yet")
    page = signed_in(admin_user).get(reverse("runs:detail", args=[fresh.pk])).content.decode()
    assert '<span data-field="base"><span class="muted">no workspace yet</span></span>' in page
    assert base_note("", "", finished=True) == "no workspace: the run ended before one was prepared"
    assert base_note("e2f6", "e2f6", finished=False) == "unchanged"
    # A run that wrote: its base, and nothing beside it.
    scene = waiting_scene(operator)
    summary = run_summary(Run.objects.get(pk=scene.run.pk))
    assert summary["base_revision"] and summary["base_note"] == "" and summary["base_revision"] != summary["revision"]
    page = signed_in(operator).get(reverse("runs:detail", args=[scene.run.pk])).content.decode()
    assert f'<span data-field="base"><code>{summary["base_revision"]}</code></span>' in page
