"""Self-approval removes the second person: turning it on is a policy change that
warns the admin, heads the version diff, and every self-approved decision says so in
the audit trail (the event and the trace)."""

from __future__ import annotations

import pytest

from approvals.models import ApprovalRequest
from approvals.policies import current_policy_row
from approvals.policy_diff import SELF_APPROVAL_ON, previous_of, version_diff
from approvals.services import DjangoApprovals, grant
from runs.models import Event
from runs.services import drive_run
from runs.views.trace import present
from tests.helpers import World
from tests.test_policy_admin import ADD, inline_form

pytestmark = pytest.mark.django_db


def turn_on_self_approval(client) -> object:
    data = inline_form(client)
    data.update({"allow_self_approval": "on", "note": "allow self approval"})
    return client.post(ADD, data, follow=True)


def test_it_warns_when_self_approval_is_turned_on_and_marks_the_version_diff(client, admin_user):
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


def test_it_records_every_self_approved_decision_in_the_audit_trail(client, admin_user, reviewer):
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
