"""Policies in the Django admin: each save is a new immutable version, a run keeps
the version it started with, versions can be compared, bad policies are refused
with the field named."""

from __future__ import annotations

import json

import pytest

from approvals.models import PolicyVersion
from approvals.policies import current_policy_row, default_policy_document
from tests.helpers import World

pytestmark = pytest.mark.django_db


def document_text(**changes) -> str:
    document = default_policy_document()
    document.pop("version")
    document.update(changes)
    return json.dumps(document)


def add(client, text: str, note: str = "edit"):
    return client.post("/admin/approvals/policyversion/add/", {"document_text": text, "note": note})


def test_it_saves_every_edit_as_a_new_version_and_runs_keep_theirs(client, admin_user):
    run = World().create()
    first = run.policy
    client.force_login(admin_user)
    response = add(client, document_text(approval_ttl_seconds=600), "shorter approvals")
    assert response.status_code == 302
    newest = current_policy_row()
    assert newest.version == first.version + 1 and newest.document["approval_ttl_seconds"] == 600
    run.refresh_from_db()
    assert run.policy == first
    first.refresh_from_db()
    assert first.document["approval_ttl_seconds"] == 3600


def test_it_refuses_an_invalid_policy_naming_the_field(client, admin_user):
    client.force_login(admin_user)
    before = PolicyVersion.objects.count()
    bad = document_text(budget={"max_proposals": 0, "max_tool_calls": 1, "max_attempts": 1, "wall_time_seconds": 1, "max_output_bytes_per_call": 2048})
    response = add(client, bad)
    assert response.status_code == 200
    assert "budget.max_proposals" in response.content.decode()
    rules = document_text(rules=[{"name": "r", "tool": "publish", "decision": "maybe"}])
    assert "rules[0].decision" in add(client, rules).content.decode()
    assert "not valid JSON" in add(client, "{oops").content.decode()
    assert PolicyVersion.objects.count() == before


def test_it_shows_a_version_with_its_difference_and_compares_two(client, admin_user):
    client.force_login(admin_user)
    base = current_policy_row()
    add(client, document_text(allow_self_approval=True), "self approval")
    newest = current_policy_row()
    page = client.get(f"/admin/approvals/policyversion/{newest.pk}/change/").content.decode()
    assert "allow_self_approval" in page and "-  &quot;allow_self_approval&quot;: false" in page
    response = client.post(
        "/admin/approvals/policyversion/",
        {"action": "compare_versions", "_selected_action": [base.pk, newest.pk]},
    )
    assert f"Policy v{base.version} → v{newest.version}" in response.content.decode()


def test_it_keeps_versions_immutable(client, admin_user):
    client.force_login(admin_user)
    row = current_policy_row()
    response = client.post(f"/admin/approvals/policyversion/{row.pk}/change/", {"note": "rewritten"})
    assert response.status_code in (302, 403) or "rewritten" not in PolicyVersion.objects.get(pk=row.pk).note
    assert client.post(f"/admin/approvals/policyversion/{row.pk}/delete/", {"post": "yes"}).status_code == 403
    assert PolicyVersion.objects.filter(pk=row.pk).exists()


def test_it_refuses_the_policy_admin_to_reviewers(client, reviewer):
    client.force_login(reviewer)
    assert client.get("/admin/approvals/policyversion/add/").status_code in (302, 403)
