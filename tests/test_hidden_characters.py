"""Nothing hides from the reader (DESIGN 15, issue 39 finding 2): characters that hide
text or reorder it on screen (bidirectional controls, zero-width and other format
characters, tag characters, controls and escapes, separators, lone surrogates) are
shown as a mark naming their code point on every page, mail, webhook text and the
API's words; a change holding them is named above its diff and can be refused at
publish; and the diff shown is the applier's own reading (core.patchtext.read_patch)."""

from __future__ import annotations

import shutil
import sys
import unicodedata
from pathlib import Path

import docker
import pytest
from django.contrib.auth.models import User
from django.test import Client
from playwright.sync_api import Browser, expect
from pytest_django import Settings
from rest_framework.test import APIClient

from approvals.models import ApprovalRequest
from approvals.policies import default_policy_document
from core.errors import InputError
from core.patchtext import parse_patch, read_patch
from core.policy import check_policy
from core.scenarios import call
from core.visible import HIDDEN_KIND, hidden_in_patch, holds_hidden, is_hidden, visible_html, visible_text
from notifications.mail import one_line
from notifications.messages import RUN_STOPPED, notice, slack
from pages.diff_view import context_lines, diff_tables
from runs.approval_flow.flow import deny, grant
from runs.approval_flow.gate import DjangoApprovals
from runs.models import Event
from runs.outcome import told
from runs.runtime import advance, create_run
from runs.services import drive_run
from tests.fixtures_services import ROOT
from tests.fixtures_web import SIZES, AsgiServer, Scene, screenshot, serious_problems, sign_in, waiting_scene
from tests.helpers import World, new_policy_version, published_patches
from tests.overview_scene import drive
from tests.runs_waiting import DEMO_CONTRACT, DEMO_SCRIPT

# The Trojan Source line: on screen the end reads as a comment, to Python it is a string.
TROJAN = 'if access != "user\u202e \u2066# admin only\u2069 \u2066":'
TROJAN_DIFF = f"""diff --git a/auth.py b/auth.py
--- a/auth.py
+++ b/auth.py
@@ -1,2 +1,2 @@
 def check(access):
-    if access != "user":
+    {TROJAN}
"""


def test_it_marks_every_kind_of_hidden_character_with_its_code_point() -> None:
    text = "a\u202eb\u2066c\u200bd\ufeffe\u2060f\U000e0041g\x1b[31mh\x85i\u2028j\udc80k\u061cl\u00adm\rn"
    assert visible_text(text) == (
        "a⟨U+202E⟩b⟨U+2066⟩c⟨U+200B⟩d⟨U+FEFF⟩e⟨U+2060⟩f⟨U+E0041⟩g⟨U+001B⟩[31mh⟨U+0085⟩i⟨U+2028⟩j⟨U+DC80⟩k⟨U+061C⟩l⟨U+00AD⟩m⟨U+000D⟩n"
    )
    # Line breaks, tabs and a carriage return that ends a line are layout, not hidden.
    assert visible_text("one\r\ntwo\tthree\nfour\r") == "one\r\ntwo\tthree\nfour\r"
    assert visible_text("é 中 e\u0301 ✓") == "é 中 e\u0301 ✓"


def test_it_finds_each_hidden_code_point_in_ascii_text_and_in_any_other() -> None:
    """Every code point, alone and inside ASCII and non-ASCII text, against the
    definition read from Unicode's tables directly: the class's ranges and the
    search's shortcut for ASCII text (core.visible) find what the list of single
    characters found."""
    c1_and_controls = {*range(0x00, 0x09), 0x0B, 0x0C, *range(0x0E, 0x20), *range(0x7F, 0xA0)}
    other = {0x2028, 0x2029, *range(0xD800, 0xE000), *range(0xE0000, 0xE0080)}
    for code in range(sys.maxunicode + 1):
        if code == 0x0D:
            continue  # the carriage return, below
        char = chr(code)
        hidden = code in c1_and_controls or code in other or unicodedata.category(char) == "Cf"
        assert holds_hidden(char) is hidden and is_hidden(char) is hidden, hex(code)
        assert holds_hidden(f"plain {char} text") is hidden and holds_hidden(f"é {char} ✓") is hidden, hex(code)
    # A carriage return is hidden unless it ends a line, ASCII or not.
    assert not holds_hidden("a\r\nb\r") and not holds_hidden("é\r\nb\r")
    assert holds_hidden("a\rb") and holds_hidden("é\rb")


def test_it_escapes_and_names_each_mark_in_html() -> None:
    html = visible_html('<b title="x">\u202e&')
    assert html == ('&lt;b title=&quot;x&quot;&gt;<span class="hidden-char" title="U+202E RIGHT-TO-LEFT OVERRIDE">⟨U+202E⟩</span>&amp;')
    assert 'title="U+DC80, the byte 0x80, which is not UTF-8"' in visible_html("\udc80")
    assert 'title="U+001B, a control character"' in visible_html("\x1b")


def test_it_reads_a_diff_as_the_applier_does() -> None:
    lines = read_patch(TROJAN_DIFF + "# a note\n@@ -9 +9 @@\n-not a hunk: commentary after the file's hunks\n")
    kinds = [(line.kind, line.path, line.old_no, line.new_no) for line in lines]
    assert kinds[:7] == [
        ("other", "", None, None),
        ("old_header", "auth.py", None, None),
        ("new_header", "auth.py", None, None),
        ("hunk", "auth.py", 1, 1),
        ("context", "auth.py", 1, 1),
        ("removed", "auth.py", 2, None),
        ("added", "auth.py", None, 2),
    ]
    # A hunk header after its file's hunks ended is commentary to the applier, so to the view too.
    assert [line.kind for line in lines[7:]] == ["other", "other", "other"]
    assert str(diff_tables(TROJAN_DIFF + "# a note\n@@ -9 +9 @@\n").unified).count("d-hunk") == 1
    assert [h.lines for p in parse_patch(TROJAN_DIFF) for h in p.hunks] == [
        [(" ", "def check(access):", True), ("-", '    if access != "user":', True), ("+", "    " + TROJAN, True)]
    ]
    refused = read_patch("--- a/x\n+++ b/x\n@@ -1,2 +1,2 @@\n-a\n")
    assert refused[-1].problem == "x: hunk 1 (@@ -1,2 +1,2 @@) ends early: the patch is truncated"


def test_it_names_the_lines_that_hold_hidden_characters() -> None:
    found = hidden_in_patch(TROJAN_DIFF + "--- a/b.py\n+++ b/b.py\n@@ -3 +3 @@\n-x\u200b = 1\n+x = 1\n")
    assert [(h.where, h.kind, h.code_points) for h in found] == [
        ("auth.py: line 2", "added", "U+202E, U+2066, U+2069"),
        ("b.py: line 3 (removed)", "removed", "U+200B"),
    ]


def test_it_shows_the_marks_in_every_layout_of_the_diff() -> None:
    tables = diff_tables(TROJAN_DIFF)
    for html in (str(tables.unified), str(tables.split)):
        assert "\u202e" not in html and "\u2066" not in html and "\u2069" not in html
        assert html.count('<span class="hidden-char" title="U+2066 LEFT-TO-RIGHT ISOLATE">⟨U+2066⟩</span>') == 2
        assert "⟨U+202E⟩" in html and "⟨U+2069⟩" in html
    assert [h.where for h in tables.hidden] == ["auth.py: line 2"]


def test_it_sends_expanded_context_with_each_hidden_character_already_marked() -> None:
    source = "".join(f"line {n}\n" for n in range(1, 10)).replace("line 2", "li\u200bne 2")
    diff = "--- a/notes.txt\n+++ b/notes.txt\n@@ -8,2 +8,2 @@\n line 8\n-line 9\n+line nine\n"
    [first, second] = context_lines(diff, {"notes.txt": source}, "notes.txt", 1, 2)
    assert first["pieces"] == [["", "line 1"]]
    # The page's script sets pieces as text: the mark and its name come from here (core.visible).
    assert second["pieces"] == [["", "li"], ["hidden", "⟨U+200B⟩", "U+200B ZERO WIDTH SPACE"], ["", "ne 2"]]


# -- pages, mail, webhooks, the API and the publish gate --------------------------------

CALC = (
    "def total(q):\n    if q < 0:\n        raise ValueError(q)\n    return q\n\n\ndef check(access):\n    "
    + TROJAN
    + "\n        return False\n"
)
TROJAN_SCRIPT = [
    call("write_file", path="src/calc.py", content=CALC),
    call("run_check", check_id="tests"),
    call("publish", message="reject negative quantities"),
    call("finish", summary="fixed"),
]
# A reviewer's words holding an override, a terminal escape and a line separator.
WORDS = "looks fine\u202e enod \x1b[31mred\u2028next"


def showing_trojan(world: World) -> None:
    """The simulated workspace shows a publish as a one-line summary; here it shows
    the Trojan Source diff, as the sandbox's workspace shows the change it publishes."""
    own = world.workspace.preview
    world.workspace.preview = lambda tool, args: TROJAN_DIFF if tool == "publish" else own(tool, args)  # type: ignore[method-assign]


def trojan_scene(operator: User) -> Scene:
    scene = waiting_scene(operator, script=TROJAN_SCRIPT)
    ApprovalRequest.objects.filter(pk=scene.request.pk).update(diff=TROJAN_DIFF)
    scene.request.refresh_from_db()
    return scene


@pytest.mark.django_db
def test_it_warns_above_the_diff_and_shows_every_mark_on_the_approval_page(operator: User, reviewer: User, client: Client) -> None:
    scene = trojan_scene(operator)
    assert TROJAN in scene.request.diff  # what is kept, and published, is the exact text
    client.force_login(reviewer)
    page = client.get(f"/approvals/{scene.request.pk}/").content.decode()
    warning = page[page.index("data-hidden-warning") : page.index("</div>", page.index("data-hidden-warning"))]
    assert "characters that are invisible or reorder text" in warning
    assert "auth.py: line 2: U+202E, U+2066, U+2069" in warning
    # Nowhere on the page (diff, arguments, trace) is one of them left raw.
    assert not any(char in page for char in "\u202e\u2066\u2069")
    assert page.count('title="U+202E RIGHT-TO-LEFT OVERRIDE">⟨U+202E⟩</span>') >= 2  # both layouts


@pytest.mark.django_db
def test_it_marks_a_reviewers_words_on_pages_in_the_api_mail_and_webhooks(operator: User, reviewer: User, client: Client) -> None:
    scene = trojan_scene(operator)
    deny(scene.request, reviewer, WORDS)
    drive(scene.world, scene.run)
    marked = "looks fine⟨U+202E⟩ enod ⟨U+001B⟩[31mred⟨U+2028⟩next"
    client.force_login(reviewer)
    for url in (f"/approvals/{scene.request.pk}/", f"/runs/{scene.run.pk}/", f"/runs/{scene.run.pk}/result/"):
        page = client.get(url).content.decode()
        assert not any(char in page for char in "\u202e\x1b\u2028"), url
        assert "⟨U+202E⟩" in page, url
    api = APIClient()
    api.force_login(reviewer)
    approval = api.get(f"/api/approvals/{scene.request.pk}/").json()
    assert approval["reason"] == marked
    assert TROJAN in approval["diff"]  # data keeps its bytes
    run = api.get(f"/api/runs/{scene.run.pk}/").json()
    assert "\u202e" not in run["said"] + (run["stop_message"] or "")
    stopped = Event.objects.filter(run=scene.run, type="stopped").get().as_dict()
    body = notice(
        delivery_id="d",
        kind=RUN_STOPPED,
        run={"id": str(scene.run.pk), "task_id": "t", "objective": "o"},
        event=stopped,
        base_url="http://h",
    )
    assert "\u202e" not in body["text"] and "\u202e" not in slack(body)["text"]
    assert one_line(f"path {WORDS}\ndecide: http://evil") == "path looks fine⟨U+202E⟩ enod ⟨U+001B⟩[31mred next decide: http://evil"


@pytest.mark.django_db
def test_it_refuses_a_publish_adding_hidden_characters_when_the_policy_says_so(operator: User) -> None:
    with pytest.raises(InputError, match="hidden_characters"):
        check_policy({**default_policy_document(), "version": 1, "publish_checks": {"hidden_characters": "hide"}})
    new_policy_version(publish_checks={"hidden_characters": "refuse"})
    world = World()
    showing_trojan(world)
    run = world.create(actor=operator, script=TROJAN_SCRIPT)
    drive_run(run, world.environment(), DjangoApprovals(run))
    found = Event.objects.get(run=run, type="secrets_found").payload
    assert found["decision"] == "refuse"
    assert found["findings"] == [{"path": "auth.py", "line": 2, "kind": HIDDEN_KIND, "chars": "U+202E, U+2066, U+2069"}]
    assert {
        "field": "auth.py:2",
        "message": "holds characters that hide or reorder text (U+202E, U+2066, U+2069); take them out of the change",
    } in found["problems"]
    assert not ApprovalRequest.objects.filter(run=run).exists(), "refused before anyone is asked"
    assert not world.executor.outbox, "nothing was published"
    run.refresh_from_db()
    assert "hidden characters" in told(run).sentence and "secret" not in told(run).sentence


# -- in a real browser, through the real sandbox and outbox -----------------------------

ACCESS = f"def allowed(access):\n    {TROJAN}\n        return False\n    return True\n"


@pytest.mark.browser
@pytest.mark.docker
@pytest.mark.django_db(transaction=True)
def test_it_shows_the_trojan_source_line_marked_and_warned_and_publishes_its_exact_bytes(
    live_server_asgi: AsgiServer,
    chromium: Browser,
    tmp_path: Path,
    settings: Settings,
    operator: User,
    reviewer: User,
    docker_engine: docker.DockerClient,
) -> None:
    source = tmp_path / "source"
    shutil.copytree(ROOT / "examples" / "orders", source)
    settings.WORKSPACE_SOURCES = [*settings.WORKSPACE_SOURCES, tmp_path]
    script = [{"tool": "write_file", "args": {"path": "orders/access.py", "content": ACCESS}}, *DEMO_SCRIPT[1:]]
    contract = {**DEMO_CONTRACT, "workspace": {"kind": "path", "path": str(source)}}
    run = create_run(contract, {"kind": "scripted", "script": script}, operator, enqueue=False)
    assert advance(str(run.pk)) == "waiting_approval"
    request = ApprovalRequest.objects.get(run=run, status="pending")
    for size, viewport in SIZES.items():
        context = chromium.new_context(viewport=viewport)
        try:
            page = context.new_page()
            sign_in(page, live_server_asgi, reviewer.username)
            page.goto(f"{live_server_asgi.url}/approvals/{request.pk}/")
            warning = page.locator("[data-hidden-warning]")
            expect(warning).to_be_visible()
            expect(warning).to_contain_text("orders/access.py: line 2: U+202E, U+2066, U+2069")
            marks = page.locator(".diff-unified .hidden-char")
            expect(marks).to_have_count(4)  # U+202E, U+2066, U+2069, U+2066 on the one added line
            assert marks.first.text_content() == "⟨U+202E⟩"
            assert marks.first.get_attribute("title") == "U+202E RIGHT-TO-LEFT OVERRIDE"
            assert serious_problems(page, f"hidden characters ({size})", viewport["width"]) == []
            warning.scroll_into_view_if_needed()
            screenshot(page, f"hidden_characters_warning_{size}")
            marks.first.scroll_into_view_if_needed()
            expect(marks.first).to_be_in_viewport()
            screenshot(page, f"hidden_characters_marks_{size}")
        finally:
            context.close()
    grant(request, reviewer)
    assert advance(str(run.pk)) == "complete"
    [published] = published_patches(str(run.pk)).values()
    assert f"+    {TROJAN}\n".encode() in published  # the exact bytes, never the marks
    assert "⟨".encode() not in published
