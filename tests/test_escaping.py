"""Model and tool output is data: markup injected through tool arguments, file
contents and check output is shown as text on every page, in every JSON answer,
and in the live stream the browser renders; no script from it ever runs."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse
from django.utils import timezone
from playwright.sync_api import Page

from core import events as ev
from core.fences import RowLock
from core.scenarios import call
from runs.models import Evidence
from runs.persistence.artifacts import ArtifactStorage
from runs.persistence.eventlog import append_events
from tests.fixtures_services import ROOT
from tests.fixtures_web import AsgiServer, Scene, sign_in, waiting_scene

if TYPE_CHECKING:
    from django.test.client import _MonkeyPatchedWSGIResponse  # the test client's response: only django-stubs names it

SCRIPT_TAG = "<script>window.__xss = 1</script>"
IMG_TAG = '<img src=x onerror="window.__xss = 2">'
HOSTILE = f"{SCRIPT_TAG}{IMG_TAG}"
RAW_MARKERS = ("<script>window.__xss", "<img src=x")
ESCAPED = "&lt;script&gt;window.__xss = 1&lt;/script&gt;"


def hostile_run(starter: User) -> tuple[Scene, str]:
    """A run whose proposals, file contents, diff and check output all carry markup."""
    script = [
        call("read_file", path="src/calc.py"),
        call(
            "write_file",
            path="src/calc.py",
            content=f"# {HOSTILE}\ndef total(q):\n    if q < 0:\n        raise ValueError(q)\n    return q\n",
        ),
        call("run_check", check_id="tests"),
        call("publish", message=f"ship it {HOSTILE}"),
    ]
    scene = waiting_scene(starter, script)
    run = scene.run
    diff = f"--- a/src/calc.py\n+++ b/src/calc.py\n@@ -1,2 +1,3 @@\n+# {HOSTILE}\n def total(q):\n-    return q\n+    return {HOSTILE}\n"
    scene.request.diff = diff
    scene.request.save(update_fields=["diff"])
    output = f"FAILED test_total - AssertionError: {HOSTILE}\n".encode()
    ref = ArtifactStorage().put(output, "text/plain")
    Evidence.objects.filter(run=run).update(output_ref=ref)
    # The check's own receipt, as a sandbox returns it: its output is tool output.
    receipt: dict[str, object] = {"call_id": "c3", "tool": "run_check", "status": "ok", "effect": "none", "revision": run.revision}
    receipt |= {"data": {"output": output.decode(), "output_ref": ref}, "artifacts": [ref]}
    append_events(
        str(run.pk),
        [
            ev.ReceiptRecorded(
                run_id=str(run.pk),
                seq=0,
                ts=timezone.now().timestamp(),
                call_id="c3",
                tool="run_check",
                attempt=2,
                valid=False,
                problem=f"replayed receipt {HOSTILE}",
                receipt=receipt,
                harness_revision=run.revision,
            )
        ],
        fence=RowLock("a test's writer"),
    )
    return scene, ref


def assert_escaped_html(response: _MonkeyPatchedWSGIResponse) -> None:
    assert response.status_code == 200, response.status_code
    assert response["Content-Type"].startswith("text/html")
    body = response.content.decode()
    for marker in RAW_MARKERS:
        assert marker not in body
    assert ESCAPED in body or "&lt;script&gt;window.__xss = 1" in body
    assert "script-src 'self'" in response["Content-Security-Policy"]


@pytest.mark.django_db
def test_it_escapes_injected_markup_on_every_page(operator: User, reviewer: User) -> None:
    scene, ref = hostile_run(operator)
    client = Client()
    client.force_login(reviewer)
    run, request = scene.run.pk, scene.request.pk
    for url in (
        reverse("runs:detail", args=[run]),
        reverse("approvals:detail", args=[request]),
        reverse("runs:artifact", args=[run, ref]),
    ):
        assert_escaped_html(client.get(url))
    # The inbox and the list show the task, not the output, but stay clean too.
    for url in (reverse("approvals:inbox"), reverse("runs:list") + "?q=%3Cscript%3E"):
        response = client.get(url)
        assert response.status_code == 200 and not any(m in response.content.decode() for m in RAW_MARKERS)


@pytest.mark.django_db
def test_it_serves_output_as_json_or_downloads_never_as_html(operator: User, reviewer: User) -> None:
    scene, ref = hostile_run(operator)
    client = Client()
    client.force_login(reviewer)
    run = scene.run.pk
    for url in (
        reverse("runs:events", args=[run]) + f"?before={scene.run.last_seq + 10}",
        reverse("runs:event", args=[run, 5]),
        reverse("runs:summary", args=[run]),
    ):
        response = client.get(url)
        assert response["Content-Type"] == "application/json" and response["X-Content-Type-Options"] == "nosniff"
    for url in (reverse("runs:report", args=[run]), reverse("runs:artifact", args=[run, ref]) + "?download=1"):
        response = client.get(url)
        assert response["Content-Disposition"].startswith("attachment")
        assert not response["Content-Type"].startswith("text/html")


def test_it_builds_the_live_trace_from_text_never_from_markup() -> None:
    """The scripts that render streamed events never parse data as HTML."""
    sources = {path.name: path.read_text() for path in (ROOT / "static" / "js").glob("*.js")}
    assert {"run_live.js", "harness.js", "new_run.js"} <= set(sources)
    forbidden = re.compile(
        r"innerHTML|outerHTML|insertAdjacentHTML|document\.write|\beval\(|new Function|DOMParser|createContextualFragment"
    )
    for name, source in sources.items():
        if name == "live_regions.js":
            # It re-reads the page it shows (same origin, escaped by the templates).
            assert source.count("DOMParser") == 1 and "fetch(window.location.pathname + window.location.search" in source
            source = source.replace("DOMParser", "")
        assert not forbidden.search(source), name
    for template in (ROOT / "templates").rglob("*.html"):
        text = template.read_text()
        assert not re.search(r"<script(?![^>]*\bsrc=)(?![^>]*application/json)", text), f"inline script in {template}"
        assert "|safe" not in text and "autoescape off" not in text, template


@pytest.mark.browser
@pytest.mark.django_db(transaction=True)
def test_it_shows_streamed_markup_as_text_in_the_browser(
    live_server_asgi: AsgiServer, browser_page: Page, operator: User, reviewer: User
) -> None:
    page = browser_page
    scene = waiting_scene(operator)
    run_id = str(scene.run.pk)
    sign_in(page, live_server_asgi, reviewer.username)
    page.goto(f"{live_server_asgi.url}/runs/{run_id}/")
    page.wait_for_selector('#conn[data-state="live"]')
    note = ev.ModelNote(run_id=run_id, seq=0, ts=timezone.now().timestamp(), call_id="c9", kind=HOSTILE, detail={"text": HOSTILE})
    append_events(run_id, [note], fence=RowLock("a test's writer"))
    card = page.locator('li.card[data-call-id="c9"]')
    card.wait_for()
    card.locator(".step-line").click()  # open the payload too
    assert HOSTILE in card.inner_text()
    assert page.locator("#timeline script, #timeline img").count() == 0
    assert page.evaluate("window.__xss === undefined")
