"""Nothing hides from the reader (DESIGN 15, issue 39 finding 2): characters that hide
text or reorder it on screen (bidirectional controls, zero-width and other format
characters, tag characters, controls and escapes, separators, lone surrogates) are
shown as a mark naming their code point on every page, mail, webhook text and the
API's words; a change holding them is named above its diff and can be refused at
publish; and the diff shown is the applier's own reading (core.patchtext.read_patch)."""

from __future__ import annotations

from core.patchtext import parse_patch, read_patch
from core.visible import hidden_in_patch, visible_html, visible_text
from pages.diff_view import diff_tables

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
