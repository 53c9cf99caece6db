"""Self-approval removes the second person, so one admin alone cannot turn it on: the
deployment decides (HARNESS_ALLOW_SELF_APPROVAL, off by default). Off, the admin's
editors cannot save a version with it on and a version saved with it on earlier has
no effect. On, turning it on is a policy change that warns the admin, heads the
version diff, and every self-approved decision says so in the audit trail (the event
and the trace)."""

from __future__ import annotations

import html
import json
from typing import TYPE_CHECKING

import pytest
from django.contrib.auth.models import User
from django.test import Client
from pytest_django import Settings

from approvals.checks import DecisionForbidden
from approvals.models import ApprovalRequest, PolicyVersion
from approvals.policies import SELF_APPROVAL_NOT_PERMITTED, current_policy_row
from approvals.policy_diff import SELF_APPROVAL_ON, previous_of, version_diff
from live.trace import present
from runs.approval_flow.flow import grant
from runs.approval_flow.gate import DjangoApprovals
from runs.models import Event
from runs.services import drive_run
from tests.helpers import World
from tests.test_policy_admin import ADD, inline_form

if TYPE_CHECKING:
    from django.test.client import _MonkeyPatchedWSGIResponse  # the test client's response: only django-stubs names it

pytestmark = pytest.mark.django_db


@pytest.fixture
def permitted(settings: Settings) -> None:
    """A deployment whose operator has permitted self-approval."""
    settings.HARNESS_ALLOW_SELF_APPROVAL = True


def turn_on_self_approval(client: Client) -> _MonkeyPatchedWSGIResponse:
    data = inline_form(client)
    data.update({"allow_self_approval": "on", "note": "allow self approval"})
    return client.post(ADD, data, follow=True)


def test_it_warns_when_self_approval_is_turned_on_and_marks_the_version_diff(permitted: None, client: Client, admin_user: User) -> None:
    client.force_login(admin_user)
    assert "no second person" in client.get(ADD).content.decode()
    page = turn_on_self_approval(client).content.decode()
    assert "SELF-APPROVAL TURNED ON" in page  # the warning after saving
    newest = current_policy_row()
    assert newest.document["allow_self_approval"] is True
    diff = version_diff(previous_of(newest), newest)
    assert diff.startswith(SELF_APPROVAL_ON)
    shown = client.get(f"/admin/approvals/policyversion/{newest.pk}/change/").content.decode()
    assert "SELF-APPROVAL TURNED ON" in shown
    # Any other edit is not marked.
    data = inline_form(client)
    data["note"] = "unrelated"
    client.post(ADD, data)
    assert not version_diff(previous_of(current_policy_row()), current_policy_row()).startswith("!!")


def test_it_records_every_self_approved_decision_in_the_audit_trail(
    permitted: None, client: Client, admin_user: User, reviewer: User
) -> None:
    client.force_login(admin_user)
    turn_on_self_approval(client)
    world = World()
    own = world.create(actor=admin_user)
    drive_run(own, world.environment(), DjangoApprovals(own))
    grant(ApprovalRequest.objects.get(run=own), admin_user)
    decided = Event.objects.get(run=own, type="approval_decided")
    assert decided.payload["self_approved"] is True and decided.payload["by"] == admin_user.username
    assert "self-approved" in str(present(decided.as_dict()))

    other_world = World()
    other = other_world.create(actor=admin_user)
    drive_run(other, other_world.environment(), DjangoApprovals(other))
    grant(ApprovalRequest.objects.get(run=other), reviewer)
    assert Event.objects.get(run=other, type="approval_decided").payload["self_approved"] is False


def test_it_lets_no_admin_turn_self_approval_on_where_the_deployment_does_not_permit_it(client: Client, admin_user: User) -> None:
    client.force_login(admin_user)
    editor = client.get(ADD).content.decode()  # (it seeds the first version)
    assert "HARNESS_ALLOW_SELF_APPROVAL is off" in editor
    before = PolicyVersion.objects.count()
    # The row editor's box is fixed off: a posted "on" saves nothing of it.
    turn_on_self_approval(client)
    assert PolicyVersion.objects.count() == before + 1 and current_policy_row().document["allow_self_approval"] is False
    # The raw JSON editor refuses it, naming the setting, and saves nothing.
    document = dict(current_policy_row().document, allow_self_approval=True)
    refused = client.post(f"{ADD}?json=1", {"document_text": json.dumps(document), "note": "self approval"})
    assert refused.status_code == 200 and html.escape(SELF_APPROVAL_NOT_PERMITTED) in refused.content.decode()
    assert PolicyVersion.objects.count() == before + 1


def test_it_gives_a_version_saved_with_self_approval_no_effect_unless_permitted(
    client: Client, admin_user: User, reviewer: User, settings: Settings
) -> None:
    settings.HARNESS_ALLOW_SELF_APPROVAL = True
    client.force_login(admin_user)
    turn_on_self_approval(client)
    assert current_policy_row().document["allow_self_approval"] is True
    # The deployment takes the permission back: the version stays, its switch is dead.
    settings.HARNESS_ALLOW_SELF_APPROVAL = False
    world = World()
    own = world.create(actor=admin_user)
    drive_run(own, world.environment(), DjangoApprovals(own))
    request = ApprovalRequest.objects.get(run=own)
    with pytest.raises(DecisionForbidden, match="separation of duties"):
        grant(request, admin_user)
    grant(request, reviewer)
    request.refresh_from_db()
    assert request.status == "granted" and request.decided_by == reviewer
    # A version made from it in the editor is saved with the switch off, and says so.
    client.post(ADD, inline_form(client) | {"note": "next"})
    newest = current_policy_row()
    assert newest.document["allow_self_approval"] is False
    assert version_diff(previous_of(newest), newest).startswith("!! Self-approval turned off")
