"""One reading of a diff for what is applied, shown and scanned. Over generated
patches (several files, created, deleted, modified and renamed, hunks with context,
lines inside a hunk that look like file or hunk headers, "No newline" markers,
commentary between the files), the reviewer's view (pages.diff_view) and the secret
scan (common.secret_scan) name the same file and the same new-side line number for
every added line as the applier's reading (core.patchtext), and all three are the
file and line the patch was written to add."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from hypothesis import given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from common.secret_scan import SecretScanner, added_lines
from core.patchtext import DEV_NULL, PatchRefused, header_line, parse_patch, read_patch
from pages.diff_view import files_of, parse

# Found by the detector on a line of its own, wherever it is added.
TOKEN = "ghp_" + "R8d2Kq7Lm4Nx9Pz3Vt6Wb1Yc5Hs0Jf2Ga7Qe"
# Names a header quotes (a space, a character outside ASCII) or that look like headers.
NAMES = ["orders/total.py", "orders/a b.txt", "docs/é.md", "x", "lib/--- y.py", "+++ z", "@@ w"]
# Texts of a hunk's lines: after their "-" or "+" some are "--- x" and "+++ y" lines,
# and some look like a hunk's header or its "No newline" marker.
TEXTS = [
    "x",
    "",
    "  indented",
    "-- x",
    "++ y",
    "--- x",
    "+++ y",
    "@@ -1 +1 @@",
    "\\ No newline at end of file",
    "diff --git a/x b/x",
    f"github_token = {TOKEN}",
]
NO_NEWLINE = "\\ No newline at end of file"


@dataclass(frozen=True)
class HunkLine:
    op: str  # " ", "-" or "+"
    text: str
    no_newline: bool  # a "No newline" marker follows it
    stripped: bool  # a blank context line written without its space, as editors leave it


@dataclass(frozen=True)
class PlannedHunk:
    gap: int  # unchanged lines before it, after the previous hunk
    lines: list[HunkLine]
    short: bool  # a count of 1 written as the start alone ("@@ -3 +3 @@")
    section: str  # what follows the second "@@" (git writes the enclosing function)


@dataclass(frozen=True)
class PlannedFile:
    old: str | None  # None: created
    new: str | None  # None: deleted
    hunks: list[PlannedHunk]
    prefixes: tuple[str, str]
    extended: bool  # "diff --git" and git's extended headers before its "---"


hunk_lines = st.builds(HunkLine, st.sampled_from(" -+"), st.sampled_from(TEXTS), st.booleans(), st.booleans())
only = {op: st.builds(HunkLine, st.just(op), st.sampled_from(TEXTS), st.booleans(), st.just(False)) for op in "-+"}
sections = st.sampled_from(["", " def total(lines):", " @@ -9 +9 @@"])
prefixes = st.sampled_from([("a/", "b/"), ("", "")])


@st.composite
def planned_files(draw: st.DrawFn, old: str | None, new: str | None) -> PlannedFile:
    if old is None or new is None:
        # A created file's one hunk adds every line; a deleted file's removes them.
        lines = draw(st.lists(only["+" if old is None else "-"], min_size=1, max_size=6))
        hunks = [PlannedHunk(0, lines, draw(st.booleans()), "")]
    else:
        planned = st.builds(PlannedHunk, st.integers(0, 5), st.lists(hunk_lines, min_size=1, max_size=8), st.booleans(), sections)
        hunks = draw(st.lists(planned, min_size=1, max_size=3))
    return PlannedFile(old, new, hunks, draw(prefixes), draw(st.booleans()))


@st.composite
def patches(draw: st.DrawFn) -> tuple[list[PlannedFile], list[str]]:
    """Files of distinct names, each created, deleted, modified or renamed, and
    commentary before the first (a commit message, as ``git format-patch`` writes it)."""
    names = draw(st.lists(st.sampled_from(NAMES), min_size=1, max_size=4, unique=True))
    files = []
    for at, name in enumerate(names):
        kind = draw(st.sampled_from(["created", "deleted", "modified", "renamed"]))
        renamed_from = f"old/{at}.txt"
        old = {"created": None, "renamed": renamed_from}.get(kind, name)
        files.append(draw(planned_files(old, None if kind == "deleted" else name)))
    preamble = draw(st.lists(st.sampled_from(["Subject: fix the totals", "", "---", " 1 file changed"]), max_size=3))
    return files, preamble


def header(marker: str, prefix: str, name: str | None) -> str:
    return header_line(marker, None if name is None else prefix + name)


def hunk_header(old_start: int, old_count: int, new_start: int, new_count: int, short: bool) -> str:
    def side(start: int, count: int) -> str:
        return str(start) if short and count == 1 else f"{start},{count}"

    return f"@@ -{side(old_start, old_count)} +{side(new_start, new_count)} @@"


def written(files: list[PlannedFile], preamble: list[str]) -> tuple[str, list[tuple[str, int, str]]]:
    """The patch's text, and (file, line in the changed file, text) of each line it adds."""
    out = [line + "\n" for line in preamble]
    added = []
    for file in files:
        old_prefix, new_prefix = file.prefixes
        path = file.new if file.new is not None else file.old
        assert path is not None
        if file.extended:
            out.append(f"diff --git a/{file.old or path} b/{path}\n")
            if file.old is None:
                out.append("new file mode 100644\n")
            elif file.new is None:
                out.append("deleted file mode 100644\n")
            elif file.old != file.new:
                out += ["similarity index 90%\n", f"rename from {file.old}\n", f"rename to {file.new}\n"]
            out.append("index 0123abc..4567def 100644\n")
        out += [header("---", old_prefix, file.old), header("+++", new_prefix, file.new)]
        old_at = new_at = 1  # the next line of each side
        for hunk in file.hunks:
            old_at, new_at = old_at + hunk.gap, new_at + hunk.gap
            old_count = sum(line.op in " -" for line in hunk.lines)
            new_count = sum(line.op in " +" for line in hunk.lines)
            # A side with no lines in the hunk is numbered by the line before it.
            old_start, new_start = old_at - (old_count == 0), new_at - (new_count == 0)
            out.append(hunk_header(old_start, old_count, new_start, new_count, hunk.short) + hunk.section + "\n")
            new_no = new_at
            for line in hunk.lines:
                out.append("\n" if line.op == " " and line.text == "" and line.stripped else f"{line.op}{line.text}\n")
                if line.no_newline:
                    out.append(NO_NEWLINE + "\n")
                if line.op == "+":
                    added.append((path, new_no, line.text))
                new_no += line.op in " +"
            old_at, new_at = old_at + old_count, new_at + new_count
    return "".join(out), added


@hypothesis_settings(max_examples=300, deadline=None)
@given(patches())
def test_it_reads_every_added_line_of_a_patch_one_way_for_the_applier_the_reviewer_and_the_scan(
    planned: tuple[list[PlannedFile], list[str]],
) -> None:
    files, preamble = planned
    text, added = written(files, preamble)

    applier = [(line.path, line.new_no, line.text) for line in read_patch(text) if line.kind == "added"]
    assert applier == added
    if any(file.old is not None and file.new is not None and file.old != file.new for file in files):
        with pytest.raises(PatchRefused, match="renames are not supported"):
            parse_patch(text)
    else:
        applied = parse_patch(text)  # what the applier writes: each hunk's lines, numbered from its start
        assert [patch.path for patch in applied] == [file.new or file.old for file in files]
        hunks = [(patch.path, hunk) for patch in applied for hunk in patch.hunks]
        numbered = [
            (path, hunk.new_start + sum(op in " +" for op, _, _ in hunk.lines[:at]), line_text)
            for path, hunk in hunks
            for at, (op, line_text, _) in enumerate(hunk.lines)
            if op == "+"
        ]
        assert numbered == applier

    rows = parse(text)
    shown = files_of(rows)
    assert [(shown_file.path, shown_file.old_path) for shown_file in shown] == [
        (file.new or file.old, file.old or DEV_NULL) for file in files
    ]
    assert [shown_file.added for shown_file in shown] == [sum(path == (file.new or file.old) for path, _, _ in applier) for file in files]
    pairs = [row["new"] for row in rows if row["type"] == "pair" and row["new"] is not None and row["new"].kind == "add"]
    assert [(line.path, line.new_no, line.text) for line in pairs] == applier

    assert added_lines(text) == applier
    found = {(finding.path, finding.line) for finding in SecretScanner().scan(text)}
    assert {(path, number) for path, number, line_text in applier if TOKEN in line_text} <= found
    assert found <= {(path, number) for path, number, _ in applier}, "only added lines are scanned, where the applier puts them"
