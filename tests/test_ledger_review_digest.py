"""A reviewer's ledger entry records the digest of exactly what the approval page
showed them (runs.approval_flow.shown; docs/design.md, Decision ledger): the page
rendered to the reviewer, fetched as the reviewer, gives the digest the grant's entry
holds, the entry's content is those bytes, and a decision posted from a page whose
content has changed since is refused."""

from __future__ import annotations

import re

import pytest
from django.contrib.auth.models import User
from django.test import Client

from approvals.models import ApprovalRequest
from ledger import verify
from ledger.export import verify_stored
from ledger.models import Content, Entry
from runs.approval_flow.gate import DjangoApprovals
from runs.approval_flow.shown import Review
from runs.models import Evidence, Run
from runs.services import drive_run
from tests.helpers import KillFlag, World

pytestmark = pytest.mark.django_db(transaction=True)


def waiting(operator: User) -> tuple[Run, ApprovalRequest]:
    world = World()
    run = world.create(actor=operator)
    assert drive_run(run, world.environment(), DjangoApprovals(run), controls=KillFlag(str(run.pk))).status == "waiting_approval"
    return run, ApprovalRequest.objects.get(run=run)


def posted_digest(html: str) -> str:
    found = set(re.findall(r'name="shown" value="([0-9a-f]{64})"', html))
    assert len(found) == 1, found
    return str(found.pop())


def test_it_records_for_a_grant_the_digest_of_the_page_the_reviewer_was_shown(operator: User, reviewer: User, resumes: list[str]) -> None:
    run, request = waiting(operator)
    client = Client()
    client.force_login(reviewer)
    page = client.get(f"/approvals/{request.pk}/")
    assert page.status_code == 200
    html = page.content.decode()
    review = page.context["review"]
    assert isinstance(review, Review)
    # What the page rendered is the review's content: the diff's lines, "If granted",
    # the evidence, the rule and the policy version.
    value = review.value
    assert value["diff"] and all(
        line[1:] in html for line in value["diff"].splitlines() if line.startswith("+") and line[1:].strip().isalnum()
    )
    assert value["if_granted"] in html.replace("&#x27;", "'")
    assert [e["check_id"] for e in value["evidence"]] == ["tests"] and "tests</strong> passed" in html
    assert value["rule"] in html and value["policy_version"] == request.policy_version
    # Recomputed from the bytes the page's content encodes to: the digest the page shows
    # the reviewer and posts with their decision.
    shown = verify.sha256(verify.canonical(value))
    assert posted_digest(html) == shown
    assert shown[:16] in page.content.decode().split('id="shown-digest"')[1][:400]
    answer = client.post(f"/approvals/{request.pk}/grant/", {"shown": shown})
    assert answer.status_code == 302
    granted = Entry.objects.get(kind="approval.granted")
    assert granted.shown == shown and granted.run_id == str(run.pk)
    assert Content.objects.get(digest=shown).body.encode() == verify.canonical(value)
    assert verify_stored() is None


def test_it_refuses_a_decision_from_a_page_whose_content_changed_since(operator: User, reviewer: User, resumes: list[str]) -> None:
    _run, request = waiting(operator)
    client = Client()
    client.force_login(reviewer)
    shown = posted_digest(client.get(f"/approvals/{request.pk}/").content.decode())
    # The evidence the page showed changes under it.
    Evidence.objects.filter(run_id=request.run_id).update(duration_ms=987654)
    answer = client.post(f"/approvals/{request.pk}/deny/", {"reason": "not this", "shown": shown}, follow=True)
    assert "has changed since your page was loaded" in answer.content.decode()
    request.refresh_from_db()
    assert request.status == "pending" and not Entry.objects.filter(kind__startswith="approval.").exists()
    fresh = posted_digest(client.get(f"/approvals/{request.pk}/").content.decode())
    assert fresh != shown
    client.post(f"/approvals/{request.pk}/deny/", {"reason": "not this", "shown": fresh})
    denied = Entry.objects.get(kind="approval.denied")
    assert denied.shown == fresh
