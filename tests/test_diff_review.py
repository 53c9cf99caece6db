"""A diff reviewed like a change: the files it touches with their status and counts,
syntax colours from Pygments (escaped, the text exactly the diff's), and comments on
lines that go with "request changes" to the model as the reviewer's words; in a real
browser at a laptop's and a phone's width, axe clean."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse
from playwright.sync_api import BrowserContext, expect

from approvals.models import ApprovalRequest
from core.scenarios import call
from pages.diff_review import HIGHLIGHT_MAX_LINES, LineComment, check_line_comments, feedback_text
from pages.diff_view import ContextRefused, context_lines, diff_tables, files_of, gaps_of, parse
from runs.approval_flow.gate import DjangoApprovals
from runs.models import Event, Run
from runs.services import drive_run
from tests.fixtures_web import SIZES, AsgiServer, Scene, screenshot, serious_problems, sign_in, waiting_scene
from tests.helpers import SCRIPT

THREE_FILES = """diff --git a/src/calc.py b/src/calc.py
--- a/src/calc.py
+++ b/src/calc.py
@@ -1,2 +1,4 @@
 def total(q):
-    return q
+    if q < 0:
+        raise ValueError("<script>alert(1)</script>")
+    return q
diff --git a/tests/test_calc.py b/tests/test_calc.py
--- /dev/null
+++ b/tests/test_calc.py
@@ -0,0 +1,2 @@
+def test_negative():
+    assert True
diff --git a/src/old.py b/src/old.py
--- a/src/old.py
+++ /dev/null
@@ -1 +0,0 @@
-OLD = 1
"""


def reviewing(operator: User, script: list[Any] | None = None) -> Scene:
    """A run waiting for its publish, the request showing a three-file diff."""
    scene = waiting_scene(operator, script)
    ApprovalRequest.objects.filter(pk=scene.request.pk).update(diff=THREE_FILES)
    scene.request.refresh_from_db()
    return scene


def test_it_lists_each_file_with_its_status_and_counts() -> None:
    files = [(f.path, f.status, f.added, f.removed) for f in files_of(parse(THREE_FILES))]
    assert files == [("src/calc.py", "modified", 3, 1), ("tests/test_calc.py", "added", 2, 0), ("src/old.py", "deleted", 0, 1)]


def test_it_colours_the_code_escaped_and_keeps_the_text_exact() -> None:
    unified = str(diff_tables(THREE_FILES).unified)
    assert '<span class="tok-k">raise</span>' in unified
    assert "<script>" not in unified and "&lt;script&gt;alert(1)&lt;/script&gt;" in unified
    assert 'id="diff-file-1"' in unified  # the tree's link target
    long = f"--- a/a.py\n+++ b/a.py\n@@ -1,0 +1,{HIGHLIGHT_MAX_LINES + 1} @@\n" + "+x = 1\n" * (HIGHLIGHT_MAX_LINES + 1)
    assert "tok-" not in str(diff_tables(long).unified)  # past the limit: plain, at once


# A 40-line file changed at line 10 and line 30: three stretches are left out (above
# the first hunk, between the two, after the last), each expandable from the source.
SOURCE = "".join(f"v{n} = {n}  # <b>\n" for n in range(1, 41))
TWO_HUNKS = """diff --git a/calc.py b/calc.py
--- a/calc.py
+++ b/calc.py
@@ -7,7 +7,8 @@
 v7 = 7  # <b>
 v8 = 8  # <b>
 v9 = 9  # <b>
-v10 = 10  # <b>
+v10 = 100  # <b>
+v10b = 101  # <b>
 v11 = 11  # <b>
 v12 = 12  # <b>
 v13 = 13  # <b>
@@ -27,7 +28,6 @@
 v27 = 27  # <b>
 v28 = 28  # <b>
 v29 = 29  # <b>
-v30 = 30  # <b>
 v31 = 31  # <b>
 v32 = 32  # <b>
 v33 = 33  # <b>
"""


def test_it_finds_the_stretches_a_diff_leaves_out_and_shows_them_from_the_source() -> None:
    rows = parse(TWO_HUNKS)
    gaps = [(g.start, g.end, g.offset, g.where) for _, g in gaps_of(rows, files_of(rows), {"calc.py": SOURCE})]
    assert gaps == [(1, 6, 0, "above"), (14, 26, 1, "between"), (34, 40, 0, "below")]
    shown = diff_tables(TWO_HUNKS, {"calc.py": SOURCE})
    assert str(shown.unified).count('class="d-expand"') == 3 and str(shown.split).count('class="d-expand"') == 3
    assert 'class="d-expand"' not in str(diff_tables(TWO_HUNKS).unified)  # no source, nothing to expand
    between = context_lines(TWO_HUNKS, {"calc.py": SOURCE}, "calc.py", 24, 26)
    # Old numbers and the new side's (one line more above), coloured, the text exact
    # (the page sets it as text).
    assert [(line["old"], line["new"]) for line in between] == [(24, 25), (25, 26), (26, 27)]
    assert between[0]["pieces"][0] == ["n", "v24"] and "".join(text for _, text in between[0]["pieces"]) == "v24 = 24  # <b>"
    for path, start, end in [("calc.py", 5, 8), ("calc.py", 35, 41), ("other.py", 1, 2), ("calc.py", 3, 2)]:
        with pytest.raises(ContextRefused):
            context_lines(TWO_HUNKS, {"calc.py": SOURCE}, path, start, end)
    # A source that is not what the diff was made from is never shown around it.
    moved = SOURCE.replace("v8 = 8", "v8 = 88")
    assert gaps_of(rows, files_of(rows), {"calc.py": moved}) == []
    with pytest.raises(ContextRefused):
        context_lines(TWO_HUNKS, {"calc.py": moved}, "calc.py", 1, 3)


def expandable(operator: User) -> Scene:
    scene = waiting_scene(operator)
    ApprovalRequest.objects.filter(pk=scene.request.pk).update(diff=TWO_HUNKS, sources={"calc.py": SOURCE})
    scene.request.refresh_from_db()
    return scene


@pytest.mark.django_db
def test_it_gives_the_context_only_to_who_may_see_the_request(operator: User, reviewer: User, outsider: User, other_member: User) -> None:
    scene = expandable(operator)
    url = reverse("approvals:context", args=[scene.request.pk])
    client = Client()
    assert client.get(url, {"path": "calc.py", "start": "1", "end": "6"}).status_code == 302  # to sign in
    client.force_login(reviewer)
    shown = client.get(url, {"path": "calc.py", "start": "1", "end": "6"})
    assert shown.status_code == 200 and [line["old"] for line in shown.json()["lines"]] == [1, 2, 3, 4, 5, 6]
    refused = client.get(url, {"path": "calc.py", "start": "5", "end": "9"})
    assert refused.status_code == 400 and refused.json() == {"error": "lines 5 to 9 of 'calc.py' are not lines this diff leaves out"}
    assert client.get(url, {"path": "calc.py", "start": "x", "end": "2"}).status_code == 400
    client.force_login(outsider)
    assert client.get(url, {"path": "calc.py", "start": "1", "end": "6"}).status_code == 403
    client.force_login(other_member)
    assert client.get(url, {"path": "calc.py", "start": "1", "end": "6"}).status_code == 404


def test_it_names_every_problem_of_the_line_comments_at_once() -> None:
    files = files_of(parse(THREE_FILES))
    comments, problems = check_line_comments(["src/calc.py", "nope.py", "src/calc.py"], ["3", "1", "x"], ["why?", "a", " "], files)
    assert comments == [] and problems == [
        "line comment 2: 'nope.py' is not a file this diff changes",
        "line comment 3: the line must be a number from 1 (it is 'x')",
        "line comment 3: write the words for the model",
    ]
    comments, problems = check_line_comments(["src/calc.py"], ["3"], ["say which quantity"], files)
    assert problems == [] and feedback_text("", comments) == "Comments on lines of the diff:\n- src/calc.py, line 3: say which quantity"


@pytest.mark.django_db
def test_it_sends_line_comments_with_a_request_for_changes_to_the_model(operator: User, reviewer: User) -> None:
    scene = reviewing(operator)
    client = Client()
    client.force_login(reviewer)
    url = reverse("approvals:changes", args=[scene.request.pk])
    refused = client.post(url, {"message": "x", "comment_path": "nope.py", "comment_line": "1", "comment_text": "hm"}, follow=True)
    assert "Changes not requested: line comment 1: &#x27;nope.py&#x27; is not a file this diff changes." in refused.content.decode()
    client.post(
        url,
        {
            "message": "Close, two things.",
            "comment_path": ["src/calc.py", "tests/test_calc.py"],
            "comment_line": ["3", "2"],
            "comment_text": ["name the quantity", "assert the error"],
        },
    )
    scene.request.refresh_from_db()
    words = "Close, two things.\n\nComments on lines of the diff:\n- src/calc.py, line 3: name the quantity\n- tests/test_calc.py, line 2: assert the error"
    assert scene.request.status == "changes_requested" and scene.request.reason == words
    decided = Event.objects.get(run=scene.run, type="approval_decided")
    assert decided.payload["reason"] == words
    assert scene.request.comments == [
        {"file": "src/calc.py", "line": 3, "text": "name the quantity"},
        {"file": "tests/test_calc.py", "line": 2, "text": "assert the error"},
    ]


def test_it_draws_each_line_comment_under_its_line_in_both_layouts() -> None:
    comments = [
        LineComment("src/calc.py", 3, "say <which> quantity"),
        LineComment("src/calc.py", 3, "and why"),
        LineComment("tests/test_calc.py", 9, "a line the diff does not show"),
    ]
    shown = diff_tables(THREE_FILES, comments=comments)
    unified, split = str(shown.unified), str(shown.split)
    under = unified.split("raise</span>", 1)[1].split("</tr>", 2)[1]
    assert 'class="d-comment"' in under and "Line 3:</span> say &lt;which&gt; quantity" in under and "and why" in under
    assert unified.count('class="d-comment"') == split.count('class="d-comment"') == 2
    header = unified.split('id="diff-file-1"', 1)[1].split("d-hunk", 1)[0]
    assert "Line 9 (not shown in this diff):</span> a line the diff does not show" in header
    assert 'class="d-comment"' not in str(diff_tables(THREE_FILES).unified)


LISTED = (
    '<li><span class="mono">src/calc.py, line 3</span>: name the quantity</li>',
    '<li><span class="mono">tests/test_calc.py, line 2</span>: assert the error</li>',
)


def changes_with_comments(client: Client, scene: Scene) -> None:
    client.post(
        reverse("approvals:changes", args=[scene.request.pk]),
        {
            "message": "Close, two things.",
            "comment_path": ["src/calc.py", "tests/test_calc.py"],
            "comment_line": ["3", "2"],
            "comment_text": ["name the quantity", "assert the error"],
        },
    )


@pytest.mark.django_db
def test_it_keeps_requested_changes_a_list_on_the_request_the_next_request_and_the_result(operator: User, reviewer: User) -> None:
    client = Client()
    client.force_login(reviewer)
    # A run that asks to publish again after the changes: its new request shows them as asked before.
    again = [*SCRIPT[:4], call("publish", message="ORD-12: reject negative quantities"), call("finish", summary="done")]
    scene = reviewing(operator, again)
    changes_with_comments(client, scene)
    page = client.get(reverse("approvals:detail", args=[scene.request.pk])).content.decode()
    decided = page.split('id="requested-changes"', 1)[1].split("The call was not performed", 1)[0]
    assert "Close, two things." in decided and all(item in decided for item in LISTED)
    assert "Comments on lines of the diff" not in decided, "the comments are a list, not a paragraph"
    drawn = page.split('class="diff-table diff-unified"', 1)[1].split("</table>", 1)[0]
    assert "Line 3:</span> name the quantity" in drawn and "Line 2:</span> assert the error" in drawn
    drive_run(Run.objects.get(pk=scene.run.pk), scene.world.environment(), DjangoApprovals(scene.run))
    following = ApprovalRequest.objects.get(run=scene.run, status="pending")
    page = client.get(reverse("approvals:detail", args=[following.pk])).content.decode()
    asked = page.split('id="asked-before"', 1)[1].split("</section>", 1)[0]
    assert "Close, two things." in asked and all(item in asked for item in LISTED)
    # A run that finishes without taking them up: its result lists them.
    ignored = reviewing(operator)
    changes_with_comments(client, ignored)
    drive_run(Run.objects.get(pk=ignored.run.pk), ignored.world.environment(), DjangoApprovals(ignored.run))
    result = client.get(reverse("runs:result", args=[ignored.run.pk])).content.decode()
    listed = result.split('id="requested-changes"', 1)[1].split("</section>", 1)[0]
    assert "Close, two things." in listed and all(item in listed for item in LISTED)
    assert "Line 3:</span> name the quantity" in result.split('class="diff-table diff-unified"', 1)[1], "drawn on the diff it was asked of"
    # A request decided before comments were kept apart shows its words whole.
    ApprovalRequest.objects.filter(pk=ignored.request.pk).update(comments=[], reason="old words\n- a.py, line 1: x")
    result = client.get(reverse("runs:result", args=[ignored.run.pk])).content.decode()
    assert "old words<br>- a.py, line 1: x" in result


@pytest.mark.browser
@pytest.mark.django_db(transaction=True)
def test_it_reviews_a_three_file_diff_and_comments_on_a_line(
    live_server_asgi: AsgiServer, context: BrowserContext, size: str, operator: User, reviewer: User
) -> None:
    scene = reviewing(operator)
    page = context.new_page()
    sign_in(page, live_server_asgi, reviewer.username)
    page.goto(f"{live_server_asgi.url}/approvals/{scene.request.pk}/")
    tree = page.locator(".diff-files li")
    expect(tree).to_have_count(3)
    expect(page.locator("#diff-title")).to_have_text("What this publish call changes if granted")
    expect(tree.nth(1)).to_contain_text("added")
    expect(tree.nth(2)).to_contain_text("deleted")
    expect(page.locator(".diff-unified .tok-k").first).to_be_visible()
    screenshot(page, f"diff_review_{size}")
    problems = serious_problems(page, "diff review", SIZES[size]["width"])
    tree.nth(1).get_by_role("link").click()
    expect(page.locator("#diff-file-1")).to_be_in_viewport()
    page.locator(".diff-unified tr.d-add td.ln:nth-child(2)", has_text="3").first.click()
    expect(page.locator("#lc-path")).to_have_value("src/calc.py")
    expect(page.locator("#lc-line")).to_have_value("3")
    page.fill("#lc-text", "name the quantity in the message")
    page.click("#lc-add")
    expect(page.locator("#line-comments li")).to_contain_text("src/calc.py, line 3: name the quantity in the message")
    problems += serious_problems(page, "line comment", SIZES[size]["width"])
    page.click("#request-changes")
    page.wait_for_url(f"**/runs/{scene.run.pk}/")
    scene.request.refresh_from_db()
    assert scene.request.reason == "Comments on lines of the diff:\n- src/calc.py, line 3: name the quantity in the message"
    # The request now shows the comment on its line, in either layout.
    page.goto(f"{live_server_asgi.url}/approvals/{scene.request.pk}/")
    drawn = page.locator(".diff-unified tr.d-comment")
    expect(drawn).to_have_count(1)
    expect(drawn).to_contain_text("Line 3: name the quantity in the message")
    expect(page.locator(".diff-unified tr.d-add:has(td.ln:text-is('3')) + tr.d-comment")).to_have_count(1)
    drawn.scroll_into_view_if_needed()
    screenshot(page, f"diff_review_commented_{size}")
    problems += serious_problems(page, "comments drawn on the diff", SIZES[size]["width"])
    assert not problems, "\n".join(problems)


@pytest.mark.browser
@pytest.mark.django_db(transaction=True)
def test_it_expands_the_context_around_a_hunk_by_keyboard(
    live_server_asgi: AsgiServer, context: BrowserContext, size: str, operator: User, reviewer: User
) -> None:
    scene = expandable(operator)
    page = context.new_page()
    sign_in(page, live_server_asgi, reviewer.username)
    page.goto(f"{live_server_asgi.url}/approvals/{scene.request.pk}/")
    unified = page.locator(".diff-unified")
    expect(unified.locator("tr.d-expand")).to_have_count(3)
    expect(unified.locator("tr.d-expand").nth(1)).to_contain_text("13 unchanged lines hidden")
    problems = serious_problems(page, "diff with context rows", SIZES[size]["width"])
    up = unified.get_by_role("button", name="Show more: lines 14 to 26 of calc.py, above the next hunk")
    up.focus()
    page.keyboard.press("Enter")
    # The whole stretch between the hunks fits in one step: its row goes, the lines come.
    expect(unified.locator("tr.d-expand")).to_have_count(2)
    expect(unified.locator("tr", has_text="v20 = 20")).to_contain_text("21")  # the new side's number
    expect(unified.locator("tr", has_text="v20 = 20")).to_contain_text("# <b>")  # text, never markup
    expect(unified.locator("td.code b")).to_have_count(0)
    expect(page.locator(".diff-unified td.code:focus")).to_contain_text("v14 = 14")
    down = unified.get_by_role("button", name="Show more: lines 34 to 40 of calc.py, below the previous lines")
    down.focus()
    page.keyboard.press("Enter")
    expect(unified.locator("tr", has_text="v40 = 40")).to_be_visible()
    # The other layout shows the same lines.
    page.get_by_role("button", name="Side by side").click()
    split = page.locator(".diff-split")
    expect(split.locator("tr.d-expand")).to_have_count(1)
    expect(split.locator("tr", has_text="v20 = 20").first).to_be_visible()
    problems += serious_problems(page, "diff with expanded context", SIZES[size]["width"])
    assert not problems, "\n".join(problems)
