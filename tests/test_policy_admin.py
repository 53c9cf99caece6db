"""Policies in the Django admin: each save is a new immutable version, a run records
the version it started with, versions can be compared, bad policies are refused
with the field named."""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING

import pytest
from django.contrib.auth.models import User
from django.test import Client
from pytest_django import Settings

from approvals.models import PolicyVersion
from approvals.policies import current_policy_row, default_policy_document
from tests.helpers import World

if TYPE_CHECKING:
    from django.test.client import _MonkeyPatchedWSGIResponse  # the test client's response: only django-stubs names it

pytestmark = pytest.mark.django_db


def document_text(**changes: object) -> str:
    document = default_policy_document()
    document.pop("version")
    document.update(changes)
    return json.dumps(document)


def add(client: Client, text: str, note: str = "edit") -> _MonkeyPatchedWSGIResponse:
    return client.post("/admin/approvals/policyversion/add/", {"document_text": text, "note": note})


def test_it_saves_every_edit_as_a_new_version_and_runs_keep_theirs(client: Client, admin_user: User) -> None:
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


def test_it_refuses_an_invalid_policy_naming_the_field(client: Client, admin_user: User) -> None:
    client.force_login(admin_user)
    before = PolicyVersion.objects.count()
    bad = document_text(
        budget={"max_proposals": 0, "max_tool_calls": 1, "max_attempts": 1, "wall_time_seconds": 1, "max_output_bytes_per_call": 2048}
    )
    response = add(client, bad)
    assert response.status_code == 200
    assert "budget.max_proposals" in response.content.decode()
    rules = document_text(rules=[{"name": "r", "tool": "publish", "decision": "maybe"}])
    assert "rules[0].decision" in add(client, rules).content.decode()
    assert "not valid JSON" in add(client, "{oops").content.decode()
    assert PolicyVersion.objects.count() == before


def test_it_shows_a_version_with_its_difference_and_compares_two(client: Client, admin_user: User, settings: Settings) -> None:
    settings.HARNESS_ALLOW_SELF_APPROVAL = True  # a deployment that permits the change this diff shows
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
    # The comparison lives at a GET URL that can be bookmarked and shared.
    url = f"/admin/approvals/policyversion/compare/?project=default&old={base.version}&new={newest.version}"
    assert response.status_code == 302 and response["Location"] == url
    page = client.get(url).content.decode()
    assert f"Policy v{base.version} → v{newest.version}" in page
    assert 'data-view="split"' in page and "css/diff.css" in page
    assert '<td class="code d-del">' in page and '<td class="code d-add">' in page
    assert client.get(url.replace(f"new={newest.version}", "new=999")).status_code == 404


def test_it_marks_what_changed_by_line_and_word_never_single_characters(client: Client, admin_user: User) -> None:
    client.force_login(admin_user)
    base = current_policy_row()
    rules = [dict(rule) for rule in base.document["rules"]]
    rules[0]["name"] = "listing is cheap"  # was "reading is free"
    add(client, document_text(approval_ttl_seconds=600, rules=rules), "shorter ttl, renamed rule")
    newest = current_policy_row()
    page = client.get(f"/admin/approvals/policyversion/compare/?project=default&old={base.version}&new={newest.version}").content.decode()
    # 3600 → 600 is one number replaced, not a "3" taken away.
    assert '<span class="x">3600</span>' in page and '<span class="x">600</span>' in page and '<span class="x">3</span>' not in page
    # Words are marked whole, and a word both keep ("is") is not marked.
    assert '<span class="x">reading</span> is <span class="x">free</span>' in page
    assert '<span class="x">listing</span> is <span class="x">cheap</span>' in page
    # Every mark is a whole word (the version's number, 1 → 2, is one too).
    marks = re.findall(r'<span class="x">([^<]*)</span>', page)
    assert set(marks) == {"3600", "600", "reading", "free", "listing", "cheap", "1", "2"}, marks


def test_it_starts_a_new_version_from_any_version(client: Client, admin_user: User) -> None:
    client.force_login(admin_user)
    first = current_policy_row()
    add(client, document_text(approval_ttl_seconds=60), "short ttl")
    second = current_policy_row()
    assert 'id="new-from-this"' in client.get(f"/admin/approvals/policyversion/{first.pk}/change/").content.decode()
    page = client.get(f"{ADD}?from={first.version}").content.decode()
    assert f"starting from v{first.version}" in page
    assert f'value="{first.document["approval_ttl_seconds"]}"' in page and 'value="60"' not in page
    assert f"starting from v{second.version}" in client.get(ADD).content.decode()
    assert client.get(f"{ADD}?from=999").status_code == 404


def test_it_sizes_a_checks_command_box_to_its_argv(client: Client, admin_user: User) -> None:
    client.force_login(admin_user)
    checks = [{"check_id": "long", "command": ["python3", "-m", "pytest", "-q", "-p", "no:cacheprovider"], "timeout_seconds": 60}]
    add(client, document_text(checks=checks), "six argv items")
    page = client.get(ADD).content.decode()
    found = re.search(r'<textarea name="checks-0-command"[^>]*>', page)
    assert found is not None
    box = found.group(0)
    assert 'rows="7"' in box


def test_it_keeps_versions_immutable(client: Client, admin_user: User) -> None:
    client.force_login(admin_user)
    row = current_policy_row()
    response = client.post(f"/admin/approvals/policyversion/{row.pk}/change/", {"note": "rewritten"})
    assert response.status_code in (302, 403) or "rewritten" not in PolicyVersion.objects.get(pk=row.pk).note
    assert client.post(f"/admin/approvals/policyversion/{row.pk}/delete/", {"post": "yes"}).status_code == 403
    assert PolicyVersion.objects.filter(pk=row.pk).exists()


def test_it_refuses_the_policy_admin_to_reviewers(client: Client, reviewer: User) -> None:
    client.force_login(reviewer)
    assert client.get("/admin/approvals/policyversion/add/").status_code in (302, 403)


ADD = "/admin/approvals/policyversion/add/"


def inline_form(client: Client) -> dict[str, str]:
    """What a browser would post back from the row editor, untouched."""
    response = client.get(ADD)
    assert response.status_code == 200
    data: dict[str, str] = {}
    forms = [response.context["main_form"]]
    for formset in (response.context["rules"], response.context["checks"]):
        forms += [formset.management_form, *formset.forms]
    for form in forms:
        for field in form:
            value = field.value()
            if value is True:
                data[field.html_name] = "on"
            elif value not in (False, None):
                data[field.html_name] = str(value)
    return data


def test_it_shows_the_row_editor_without_inline_scripts_or_styles(client: Client, admin_user: User) -> None:
    client.force_login(admin_user)
    page = client.get(ADD).content.decode()
    assert 'name="rules-0-decision"' in page and 'name="checks-0-command"' in page and 'name="budget_max_proposals"' in page
    assert "style=" not in page
    assert re.search(r"<script(?![^>]*\bsrc=)", page) is None
    assert 'name="document_text"' in client.get(ADD + "?json=1").content.decode()


def test_it_changes_a_rule_decision_inline_as_a_new_version(client: Client, admin_user: User) -> None:
    client.force_login(admin_user)
    before = current_policy_row()
    data = inline_form(client)
    data.update({"rules-0-decision": "deny", "note": "no listing"})
    response = client.post(ADD, data)
    assert response.status_code == 302
    newest = current_policy_row()
    assert newest.version == before.version + 1 and newest.note == "no listing"
    assert newest.document["rules"][0] == {**before.document["rules"][0], "decision": "deny"}
    unchanged = {k: v for k, v in newest.document.items() if k not in ("rules", "version")}
    assert unchanged == {k: v for k, v in before.document.items() if k not in ("rules", "version")}
    assert newest.document["rules"][1:] == before.document["rules"][1:]


def test_it_adds_a_check_and_a_constrained_rule_inline(client: Client, admin_user: User) -> None:
    client.force_login(admin_user)
    before = current_policy_row()
    data = inline_form(client)
    n = len(before.document["rules"])
    data.update(
        {
            "checks-1-check_id": "lint",
            "checks-1-command": "ruff\ncheck\n.\n",
            "checks-1-timeout_seconds": "60",
            "checks-1-image": "python:3.12",
            f"rules-{n}-name": "docs only",
            f"rules-{n}-tool": "write_*",
            f"rules-{n}-decision": "ask",
            f"rules-{n}-when": "path=docs/*, README.md",
        }
    )
    assert client.post(ADD, data).status_code == 302
    newest = current_policy_row()
    lint = {"check_id": "lint", "command": ["ruff", "check", "."], "version": "1", "timeout_seconds": 60, "image": "python:3.12"}
    assert newest.document["checks"][1] == lint
    docs = {"name": "docs only", "tool": "write_*", "decision": "ask", "when": {"path": ["docs/*", "README.md"]}}
    assert newest.document["rules"][n] == docs


def test_it_refuses_an_invalid_inline_row_naming_the_field(client: Client, admin_user: User) -> None:
    client.force_login(admin_user)
    data = inline_form(client)
    before = PolicyVersion.objects.count()
    data.update({"checks-1-check_id": "Bad ID!", "checks-1-command": "", "rules-1-decision": "maybe", "budget_max_attempts": "0"})
    response = client.post(ADD, data)
    assert response.status_code == 200
    page = response.content.decode()
    # Each problem is on its field and, at the top, named as the page labels it.
    for said in (
        "Check row 2, check id: must be 1 to 64",
        "Check row 2, command: must list at least one item",
        "Rule row 2, decision: must be one of",
        "Max attempts: must be at least 1",
    ):
        assert said in page, said
    assert response.context["checks"].forms[1].errors.keys() == {"check_id", "command"}
    assert "decision" in response.context["rules"].forms[1].errors
    assert "budget_max_attempts" in response.context["main_form"].errors
    data.update({"checks-1-check_id": "lint", "checks-1-command": "true", "rules-1-decision": "allow", "rules-1-when": "no equals sign"})
    data["budget_max_attempts"] = "3"
    response = client.post(ADD, data)
    assert "must look like arg=glob1,glob2" in str(response.context["rules"].forms[1].errors["when"])
    assert PolicyVersion.objects.count() == before


def test_it_deletes_a_rule_row(client: Client, admin_user: User) -> None:
    client.force_login(admin_user)
    before = current_policy_row()
    data = inline_form(client)
    data["rules-2-DELETE"] = "on"
    assert client.post(ADD, data).status_code == 302
    rules = before.document["rules"]
    assert current_policy_row().document["rules"] == rules[:2] + rules[3:]


def test_it_reorders_rules_inline(client: Client, admin_user: User) -> None:
    client.force_login(admin_user)
    rules = current_policy_row().document["rules"]
    data = inline_form(client)
    data[f"rules-{len(rules) - 1}-ORDER"] = "0"
    assert client.post(ADD, data).status_code == 302
    assert current_policy_row().document["rules"] == rules[-1:] + rules[:-1]


def test_it_sets_and_validates_the_limit_on_waiting_inline(client: Client, admin_user: User) -> None:
    client.force_login(admin_user)
    data = inline_form(client)
    data["max_wait_seconds"] = "0"
    response = client.post(ADD, data)
    assert response.status_code == 200 and "max_wait_seconds" in response.context["main_form"].errors
    data["max_wait_seconds"] = "900"
    assert client.post(ADD, data).status_code == 302
    assert current_policy_row().document["max_wait_seconds"] == 900
    assert inline_form(client)["max_wait_seconds"] == "900"


def test_it_sets_the_publish_checks_inline_and_keeps_them_on_the_next_save(client: Client, admin_user: User) -> None:
    client.force_login(admin_user)
    data = inline_form(client)
    data["publish_allowed_secrets"] = "tests/fixtures/fake.pem"
    response = client.post(ADD, data)
    assert response.status_code == 200 and "publish_allowed_secrets" in response.context["main_form"].errors
    data.update(
        {
            "publish_secrets": "ask",
            "publish_moved_base": "stale",
            "publish_hidden_characters": "refuse",
            "publish_allowed_secrets": "tests/fixtures/fake.pem#0123456789abcdef\n",
        }
    )
    assert client.post(ADD, data).status_code == 302
    saved = current_policy_row().document["publish_checks"]
    assert saved == {
        "secrets": "ask",
        "allowed_secrets": [{"path": "tests/fixtures/fake.pem", "fingerprint": "0123456789abcdef"}],
        "moved_base": "stale",
        "hidden_characters": "refuse",
    }
    again = inline_form(client)
    assert (again["publish_secrets"], again["publish_moved_base"], again["publish_hidden_characters"]) == ("ask", "stale", "refuse")
    again["note"] = "another edit"
    assert client.post(ADD, again).status_code == 302
    assert current_policy_row().document["publish_checks"] == saved


def test_it_pins_a_rule_to_a_tool_version_inline_and_refuses_a_malformed_one(client: Client, admin_user: User) -> None:
    client.force_login(admin_user)
    data = inline_form(client)
    n = len(current_policy_row().document["rules"])
    data.update({f"rules-{n}-name": "reviewed schema", f"rules-{n}-tool": "tracker.create_issue", f"rules-{n}-decision": "ask"})
    data[f"rules-{n}-version"] = "223b5c94 00feea73"
    before = PolicyVersion.objects.count()
    response = client.post(ADD, data)
    assert response.status_code == 200 and PolicyVersion.objects.count() == before
    assert f"Rule row {n + 1}, tool version: must be a tool&#x27;s version as its approval page shows it" in response.content.decode()
    assert "version" in response.context["rules"].forms[n].errors
    data[f"rules-{n}-version"] = " 223b5c9400feea73 "
    assert client.post(ADD, data).status_code == 302
    pinned = {"name": "reviewed schema", "tool": "tracker.create_issue", "decision": "ask", "version": "223b5c9400feea73"}
    assert current_policy_row().document["rules"][n] == pinned
    # The row shows it, and a save that leaves it alone keeps it; emptied, the rule matches any version.
    data = inline_form(client)
    assert data[f"rules-{n}-version"] == "223b5c9400feea73"
    assert client.post(ADD, {**data, "note": "again"}).status_code == 302
    assert current_policy_row().document["rules"][n] == pinned
    data[f"rules-{n}-version"] = ""
    assert client.post(ADD, data).status_code == 302
    assert "version" not in current_policy_row().document["rules"][n]


def test_it_keeps_a_rules_reviewers_through_the_row_editor_and_refuses_malformed_ones(client: Client, admin_user: User) -> None:
    """A quorum set in the JSON editor survives a save from the rows, and can be set there."""
    client.force_login(admin_user)
    document = dict(current_policy_row().document)
    asks = next(i for i, rule in enumerate(document["rules"]) if rule["decision"] == "ask")
    quorum = {"count": 2, "users": ["ana", "bo"], "groups": ["release"]}
    document["rules"][asks] = {**document["rules"][asks], "reviewers": quorum}
    assert add(client, json.dumps(document)).status_code == 302
    data = inline_form(client)
    assert data[f"rules-{asks}-reviewers"] == "count=2\nusers=ana,bo\ngroups=release"
    assert client.post(ADD, {**data, "note": "another edit"}).status_code == 302
    assert current_policy_row().document["rules"][asks]["reviewers"] == quorum
    for wrong, named in (
        ("count=two", "count=two: the number of distinct people"),
        ("quorum=2", "each line must be count=N"),
        ("count=11", "count"),
    ):
        before = PolicyVersion.objects.count()
        response = client.post(ADD, {**data, f"rules-{asks}-reviewers": wrong})
        assert response.status_code == 200 and PolicyVersion.objects.count() == before, wrong
        assert named in response.content.decode(), wrong
    assert client.post(ADD, {**data, f"rules-{asks}-reviewers": "users=cy"}).status_code == 302
    assert current_policy_row().document["rules"][asks]["reviewers"] == {"users": ["cy"]}
