"""The secret findings and a moved base on the approval page, in a real browser
(Chromium through Playwright, against Daphne) at a laptop's and a phone's width:
the findings table comes before the diff, names file, line, kind and fingerprint,
and the page passes axe-core's serious and critical checks and fits the screen."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from playwright.sync_api import BrowserContext, expect

from core import events as ev
from core.fences import RowLock
from runs.persistence.eventlog import append_event
from tests.fixtures_web import SIZES, AsgiServer, screenshot, serious_problems, sign_in, waiting_scene

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

FINDINGS = [
    {"path": "config/app.ini", "line": 2, "kind": "masked secret", "fingerprint": "0f1e2d3c4b5a6978"},
    {
        "path": "deploy/keys/production_signing_key_for_the_payments_service.pem",
        "line": 1,
        "kind": "private key",
        "fingerprint": "8796a5b4c3d2e1f0",
    },
]


def test_it_shows_the_findings_above_the_diff_at_each_width(
    live_server_asgi: AsgiServer, context: BrowserContext, size: str, operator: User, reviewer: User
) -> None:
    scene = waiting_scene(operator)
    append_event(
        str(scene.run.pk),
        ev.SecretsFound,
        fence=RowLock("a test's scene"),
        call_id=scene.request.call_id,
        tool="publish",
        findings=FINDINGS,
        decision="ask",
        reason="a reviewer must grant it having seen the findings",
        policy_version=1,
    )
    page = context.new_page()
    sign_in(page, live_server_asgi, reviewer.username)
    page.goto(f"{live_server_asgi.url}/approvals/{scene.request.pk}/")
    findings = page.locator("#secret-findings")
    expect(findings).to_contain_text("Secrets found in this change")
    expect(findings.locator("li")).to_have_count(2)
    expect(findings.locator("li").first).to_contain_text("config/app.ini, line 2: masked secret (fingerprint 0f1e2d3c4b5a6978)")
    above = page.evaluate(
        "document.querySelector('#secret-findings').compareDocumentPosition(document.querySelector('.panel-flush'))"
        " & Node.DOCUMENT_POSITION_FOLLOWING"
    )
    assert above, "the findings come before the diff"
    problems = serious_problems(page, "approval with findings", SIZES[size]["width"])
    screenshot(page, f"approval_secret_findings_{size}")
    assert not problems, "\n".join(problems)
