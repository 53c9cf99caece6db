"""A trial's page, report, exports and API (docs/design.md, Trials): the comparison
drawn server-side and escaped, each mark linking to its runs; CSRF and each project's
permission as on every page; the API's JSON and CSV; a trial's requests marked in the inbox."""

from __future__ import annotations

import csv
import io
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from rest_framework import serializers

from api.models import ApiToken
from api.trials import ComparisonSerializer
from projects.models import Membership, Project, Role
from tests.test_trials import run_trial
from tests.trial_scene import CAREFUL, TASK, lab1_variants
from trials import service
from trials.models import Trial

pytestmark = [pytest.mark.django_db(transaction=True)]


@pytest.fixture
def quiet(monkeypatch: pytest.MonkeyPatch, resumes: list[str]) -> None:
    monkeypatch.setattr("trials.signals._enqueue_review", lambda request_id: None)
    monkeypatch.setattr("trials.signals._enqueue_tend", lambda trial_id: None)


def signed_in(user: User) -> Client:
    client = Client(enforce_csrf_checks=True)
    client.force_login(user)
    return client


def test_it_shows_the_comparison_with_unauthorized_effects_first_and_every_mark_linked(operator: User, quiet: None) -> None:
    variants = lab1_variants({"kind": "scripted", "script": CAREFUL})[:2]
    variants[1]["name"] = "<b>no permissions</b>"
    trial = service.create_trial(task=TASK, variants=variants, k=2, actor=operator, enqueue=False)
    runs = run_trial(trial)
    page = signed_in(operator).get(f"/trials/{trial.pk}/")
    assert page.status_code == 200
    html = page.content.decode()
    assert "<b>no permissions</b>" not in html and "&lt;b&gt;no permissions&lt;/b&gt;" in html
    assert html.index("Unauthorized effects: 2") < html.index("trial-table")
    assert html.count('href="#variant-bno-permissionsb"') >= 3  # the table's row, its bar, its point
    for run in runs:
        assert f"/runs/{run.pk}/" in html
    assert "<svg" in html and "trial-bar-unsafe" in html
    report = signed_in(operator).get(f"/trials/{trial.pk}/report.html")
    assert report.status_code == 200 and "attachment" in report["Content-Disposition"]
    assert f"http://testserver/runs/{runs[0].pk}/" in report.content.decode()
    exported = signed_in(operator).get(f"/trials/{trial.pk}/export/?format=csv").content.decode()
    assert len(list(csv.DictReader(io.StringIO(exported)))) == 4


def test_it_hides_another_projects_trial_and_stops_only_with_csrf_and_an_operator(
    operator: User, reviewer: User, other_member: User, other_project: Project, quiet: None
) -> None:
    trial = service.create_trial(task=TASK, variants=lab1_variants()[:1], k=1, actor=operator, enqueue=False)
    assert signed_in(other_member).get(f"/trials/{trial.pk}/").status_code == 404
    assert signed_in(other_member).get(f"/api/trials/{trial.pk}/").status_code in (403, 404)
    assert signed_in(reviewer).post(f"/trials/{trial.pk}/stop/").status_code == 403  # no CSRF token
    client = Client()
    client.force_login(reviewer)
    assert client.post(f"/trials/{trial.pk}/stop/").status_code == 403  # a reviewer operates nothing
    client.force_login(operator)
    assert client.post(f"/trials/{trial.pk}/stop/").status_code == 302
    trial.refresh_from_db()
    assert trial.status == Trial.Status.STOPPED


def test_it_starts_and_reads_a_trial_through_the_api(operator: User, quiet: None) -> None:
    client = Client(headers={"Authorization": f"Token {ApiToken.issue(operator)[1]}"})
    refused = client.post("/api/trials/", {"task": TASK, "variants": [{"name": "x"}], "k": 1}, content_type="application/json")
    assert refused.status_code == 400 and "variants[0].proposer" in str(refused.json())
    made = client.post(
        "/api/trials/",
        {
            "task": TASK,
            "variants": [
                {"name": "careful", "proposer": {"kind": "scripted", "script": CAREFUL}, "reviewer": {"kind": "rule", "decision": "grant"}}
            ],
            "k": 2,
        },
        content_type="application/json",
    )
    assert made.status_code == 201, made.json()
    trial = Trial.objects.get(pk=made.json()["id"])
    assert made.json()["progress"]["runs"] == 2
    run_trial(trial)
    comparison = client.get(f"/api/trials/{trial.pk}/comparison/").json()
    assert comparison["variants"][0]["successes"] == 2 and comparison["unauthorized"] == []
    as_csv = client.get(f"/api/trials/{trial.pk}/comparison/?format=csv")
    assert as_csv["Content-Type"].startswith("text/csv") and as_csv.content.decode().count("\n") == 3
    assert client.get("/api/trials/").json()["count"] == 1


def key_mismatches(value: Any, field: serializers.Field[Any, Any, Any, Any] | None, where: str = "") -> list[str]:
    """Where the answer's keys and the schema's fields differ, walking nested serializers."""
    if isinstance(field, serializers.ListSerializer):
        return [m for i, item in enumerate(value or []) for m in key_mismatches(item, field.child, f"{where}[{i}]")]
    if not isinstance(field, serializers.Serializer) or value is None:
        return []
    fields = field.fields
    said = [f"{where}.{key}: not documented" for key in value.keys() - fields.keys()]
    said += [f"{where}.{key}: documented, not answered" for key in fields.keys() - value.keys() if fields[key].required]
    return said + [m for key in value.keys() & fields.keys() for m in key_mismatches(value[key], fields[key], f"{where}.{key}")]


def test_it_documents_every_field_of_the_comparison_in_the_api_schema(operator: User, quiet: None) -> None:
    """docs/openapi.yaml's comparison (api.trials.ComparisonSerializer) is what the API answers:
    every field of a trial with unauthorized effects and differences, of the type it says."""
    trial = service.create_trial(task=TASK, variants=lab1_variants(), k=2, actor=operator, seed=3, enqueue=False)
    run_trial(trial)
    client = Client(headers={"Authorization": f"Token {ApiToken.issue(operator)[1]}"})
    answer = client.get(f"/api/trials/{trial.pk}/comparison/").json()
    assert answer["unauthorized"] and answer["differences"], "the trial shows every part of the comparison"
    checked = ComparisonSerializer(data=answer)
    assert checked.is_valid(), checked.errors
    assert key_mismatches(answer, ComparisonSerializer()) == []


def test_it_marks_a_trials_request_in_the_inbox(operator: User, reviewer: User, quiet: None) -> None:
    from runs.approval_flow.gate import DjangoApprovals
    from runs.services import drive_run
    from tests.trial_scene import orders_environment

    variants = [{"name": "people", "proposer": {"kind": "scripted", "script": CAREFUL}, "reviewer": {"kind": "people"}}]
    trial = service.create_trial(task=TASK, variants=variants, k=1, actor=operator, enqueue=False)
    run = service.runs_of(trial).get()
    assert drive_run(run, orders_environment(), DjangoApprovals(run)).status == "waiting_approval"
    inbox = signed_in(reviewer).get("/approvals/").content.decode()
    assert f'href="/trials/{trial.pk}/">trial {trial.pk}</a>' in inbox
    assert Membership.objects.filter(role=Role.REVIEWER, user__username__startswith="trial-").count() == 0  # people decide here
