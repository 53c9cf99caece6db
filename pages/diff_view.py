"""Unified diffs for people: line numbers, added / removed colouring, the changed
part of a modified line marked, syntax colours and the list of files
(pages.diff_review), and a side-by-side layout, with the context around the hunks
to expand. The lines are the applier's reading of the diff (core.patchtext.read_patch):
which line is a header, a hunk's line or commentary, and each line's file and number,
are what the applier takes them to be. The table rows are built here, not in a
template loop (which took seconds for tens of thousands of lines), each with
``format_html``, and every piece of text goes in through ``core.visible.visible_html``:
escaped, with each character that hides or reorders text shown as a mark naming it."""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString, mark_safe

from common.redact import MASK
from core.patchtext import DEV_NULL, PatchLine, read_patch
from core.visible import HiddenLine, char_name, hidden_lines, mark, split_hidden, visible_html
from pages import diff_review
from pages.diff_review import DiffFile, LineComment, file_status, highlighted, lexed_lines, lexer_for

# Past this a changed pair of lines is shown whole instead of diffed word by word.
INTRALINE_LIMIT = 500


@dataclass
class Line:
    kind: str  # add | del | ctx
    text: str
    old_no: int | None = None
    new_no: int | None = None
    segments: list[tuple[str, bool]] = field(default_factory=list)
    path: str = ""  # the file the line is in
    pieces: list[tuple[str, str]] = field(default_factory=list)  # its syntax colours, when known
    comments: list[LineComment] = field(default_factory=list)  # a reviewer's, on this line of the new side


# Words, runs of white space, and each other character: what a changed part is made
# of, so a changed number or name is marked whole, never a character inside it.
WORD = re.compile(r"\w+|\s+|[^\w\s]")
# Below this likeness a removed line and the added one beside it are not one line
# edited but two different lines: neither is marked inside, the line's colour says it.
INTRALINE_LIKENESS = 0.5


def _joined(segments: list[tuple[str, bool]]) -> list[tuple[str, bool]]:
    """Neighbouring parts of the same kind as one, and a gap of only white space
    between two changed parts changed too (one mark over "was  here", not two)."""
    out: list[tuple[str, bool]] = []
    for index, (text, changed) in enumerate(segments):
        between = 0 < index < len(segments) - 1 and segments[index - 1][1] and segments[index + 1][1]
        if not changed and between and text.isspace():
            changed = True
        if out and out[-1][1] == changed:
            out[-1] = (out[-1][0] + text, changed)
        else:
            out.append((text, changed))
    return out


def _mark_changes(old: Line, new: Line) -> None:
    """Mark the words that differ between a removed line and its replacement."""
    if len(old.text) > INTRALINE_LIMIT or len(new.text) > INTRALINE_LIMIT:
        return
    a, b = WORD.findall(old.text), WORD.findall(new.text)
    matcher = difflib.SequenceMatcher(None, a, b, autojunk=False)
    if matcher.ratio() < INTRALINE_LIKENESS:
        return
    old_parts: list[tuple[str, bool]] = []
    new_parts: list[tuple[str, bool]] = []
    for op, a1, a2, b1, b2 in matcher.get_opcodes():
        if a2 > a1:
            old_parts.append(("".join(a[a1:a2]), op != "equal"))
        if b2 > b1:
            new_parts.append(("".join(b[b1:b2]), op != "equal"))
    old.segments, new.segments = _joined(old_parts), _joined(new_parts)


def _pair_block(removed: list[Line], added: list[Line]) -> list[tuple[Line | None, Line | None]]:
    pairs: list[tuple[Line | None, Line | None]] = []
    for index in range(max(len(removed), len(added))):
        old = removed[index] if index < len(removed) else None
        new = added[index] if index < len(added) else None
        if old and new:
            _mark_changes(old, new)
        pairs.append((old, new))
    return pairs


def parse(diff: str, lines: list[PatchLine] | None = None) -> list[dict[str, Any]]:
    """Rows of a unified diff (or of its ``lines`` already read): ``file`` / ``hunk`` /
    ``meta`` headers and paired lines (``pair``: removed, added or context on both
    sides), each as ``core.patchtext.read_patch`` reads it."""
    rows: list[dict[str, Any]] = []
    removed: list[Line] = []
    added: list[Line] = []

    def flush() -> None:
        for old, new in _pair_block(removed, added):
            rows.append({"type": "pair", "old": old, "new": new})
        removed.clear()
        added.clear()

    for read in read_patch(diff or "") if lines is None else lines:
        kind = read.kind
        if kind == "removed":
            removed.append(Line("del", read.text, old_no=read.old_no, path=read.path))
            continue
        if kind == "added":
            added.append(Line("add", read.text, new_no=read.new_no, path=read.path))
            continue
        flush()
        if kind == "context":
            line = Line("ctx", read.text, old_no=read.old_no, new_no=read.new_no, path=read.path)
            rows.append({"type": "pair", "old": line, "new": line})
        elif kind == "hunk":
            rows.append({"type": "hunk", "text": read.text, "span": read.span})
        elif kind in ("old_header", "new_header"):
            rows.append({"type": "file", "text": read.text, "header": kind, "named": read.named, "path": read.path})
        elif read.text.startswith("diff "):
            rows.append({"type": "file", "text": read.text})
        else:
            rows.append({"type": "meta", "text": read.text})
    flush()
    for row in rows:
        for side in ("old", "new"):
            paired: Line | None = row.get(side)
            if paired is not None and not paired.segments:
                paired.segments = [(paired.text, False)]
    return rows


def _unified(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The same rows one line each: a modified block's removed lines, then its added ones."""
    out: list[dict[str, Any]] = []
    added: list[Line] = []

    def flush() -> None:
        out.extend({"type": "line", "line": line} for line in added)
        added.clear()

    for row in rows:
        if row["type"] != "pair":
            flush()
            out.append(row)
            continue
        old, new = row["old"], row["new"]
        if old is new:
            flush()
            out.append({"type": "line", "line": old})
            continue
        if old is not None:
            out.append({"type": "line", "line": old})
        if new is not None:
            added.append(new)
    flush()
    return out


def files_of(rows: list[dict[str, Any]]) -> list[DiffFile]:
    """The files the diff's headers name (as the applier writes them), each with its
    counts; each file's ``+++`` row learns its place (``anchor``), which the tree links to."""
    files: list[DiffFile] = []
    old = DEV_NULL
    current: DiffFile | None = None
    for row in rows:
        if row.get("header") == "old_header":
            old = row["named"] if row["named"] is not None else DEV_NULL
        elif row.get("header") == "new_header":
            new = row["named"] if row["named"] is not None else DEV_NULL
            current = DiffFile(len(files), row["path"], old, file_status(old, new))
            row["anchor"] = current.index
            files.append(current)
        elif row["type"] == "pair" and current is not None:
            current.added += row["new"] is not None and row["new"].kind == "add"
            current.removed += row["old"] is not None and row["old"].kind == "del"
    return files


def masked_lines(diff: str) -> list[tuple[str, int]]:
    """(file, number of its diff lines showing MASK), for each file that has any."""
    counts: dict[str, int] = {}
    for line in read_patch(diff or ""):
        if line.kind in ("added", "removed", "context") and MASK in line.text:
            counts[line.path] = counts.get(line.path, 0) + 1
    return list(counts.items())


@dataclass(frozen=True)
class Tables:
    """A diff as the page shows it: both layouts' rows, the counts, the files, and
    the lines holding hidden characters (the warning above the diff names them)."""

    split: SafeString
    unified: SafeString
    added: int
    removed: int
    files: list[DiffFile]
    hidden: list[HiddenLine]


def diff_tables(diff: str, sources: dict[str, str] | str = "", comments: Iterable[LineComment] = ()) -> Tables:
    """The diff's tables, rendered here rather than in a template loop: a diff of tens
    of thousands of lines took the template seconds per page (docs/performance-history.md, Diff cost).
    With the request's ``sources``, each stretch of a file the diff leaves out gets a
    row to expand it (``with_gaps``); a reviewer's line ``comments`` are drawn under
    their lines (``place_comments``)."""
    lines = read_patch(diff or "")
    rows = parse(diff, lines)
    files = files_of(rows)
    place_comments(rows, comments)
    added = sum(1 for r in rows if r["type"] == "pair" and r["new"] is not None and r["new"].kind == "add")
    removed = sum(1 for r in rows if r["type"] == "pair" and r["old"] is not None and r["old"].kind == "del")
    if len(rows) <= diff_review.HIGHLIGHT_MAX_LINES:
        colour(rows)
    if isinstance(sources, dict) and sources:
        rows = with_gaps(rows, files, sources)
    return Tables(_split_html(rows), _unified_html(_unified(rows)), added, removed, files, hidden_lines(lines))


def place_comments(rows: list[dict[str, Any]], comments: Iterable[LineComment]) -> None:
    """Each comment under the line it names (its file, the new side's number), as the
    reviewer left it; one whose line the diff does not show goes under its file's
    header, saying so, so that no comment is dropped from the diff."""
    at: dict[tuple[str, int], Line] = {}
    headers: dict[str, dict[str, Any]] = {}
    for row in rows:
        new = row.get("new")
        if row["type"] == "pair" and new is not None and new.new_no is not None:
            at.setdefault((new.path, new.new_no), new)
        elif "anchor" in row:
            headers.setdefault(row["path"], row)
    for comment in comments:
        line = at.get((comment.path, comment.line))
        if line is not None:
            line.comments.append(comment)
        elif comment.path in headers:
            headers[comment.path].setdefault("comments", []).append(comment)


def _comments_html(comments: list[LineComment], columns: int, placed: bool) -> SafeString:
    """The row under a line (or a file's header, ``placed`` False) holding its comments."""
    items = format_html_join(
        "",
        '<li><span class="lc-where">{}</span> {}</li>',
        ((f"Line {c.line}:" if placed else f"Line {c.line} (not shown in this diff):", _shown(c.text)) for c in comments),
    )
    return format_html(
        '<tr class="d-comment"><td class="code" colspan="{}"><ul class="diff-comments" aria-label="Reviewer\'s comments">{}</ul></td></tr>\n',
        columns,
        items,
    )


MARKS = {"add": mark_safe("+"), "del": mark_safe("\u2212"), "ctx": mark_safe("")}


# -- context around the hunks ------------------------------------------------------------


@dataclass(frozen=True)
class Gap:
    """A stretch of a file's old side the diff does not show: lines ``start`` to
    ``end``, each shown at its number plus ``offset`` on the new side. ``where``:
    above the first hunk, between two, or after the last."""

    index: int
    path: str
    start: int
    end: int
    offset: int
    where: str


def source_lines(text: str) -> list[str]:
    """A file's lines as the diff numbers them (split at "\n" only, as ``parse``)."""
    lines = text.split("\n")
    return lines[:-1] if lines[-1] == "" else lines


def agreeing(rows: list[dict[str, Any]], sources: dict[str, str]) -> dict[str, list[str]]:
    """The sources whose every context and removed line is the diff's, line for line:
    a file that disagrees (it is not what the diff was made from) is not expanded."""
    lines = {path: source_lines(text) for path, text in sources.items() if isinstance(text, str)}
    for row in rows:
        if row["type"] != "pair" or row["old"] is None:
            continue
        old: Line = row["old"]
        known = lines.get(old.path)
        if known is not None and (old.old_no is None or not 0 < old.old_no <= len(known) or known[old.old_no - 1] != old.text):
            del lines[old.path]
    return lines


def gaps_of(rows: list[dict[str, Any]], files: list[DiffFile], sources: dict[str, str]) -> list[tuple[int, Gap]]:
    """Each gap of a file whose source agrees with the diff, with the place among
    ``rows`` it sits before (above its hunk's header, or after its file's last row)."""
    known = agreeing(rows, sources)
    paths = {f.index: f.path for f in files}
    found: list[tuple[int, Gap]] = []
    path: str | None = None
    in_body = False
    old_last = new_last = 0

    def add(at: int, start: int, end: int, offset: int, where: str) -> None:
        if path is not None and start <= end:
            found.append((at, Gap(len(found), path, start, end, offset, where)))

    for at, row in enumerate(rows):
        if row["type"] == "file" and in_body and path in known:
            add(at, old_last + 1, len(known[path]), new_last - old_last, "below")
        if row["type"] == "file":
            in_body = False
        if "anchor" in row:
            path, old_last, new_last = paths[row["anchor"]], 0, 0
        elif row["type"] == "hunk" and path in known:
            old_start, old_count, new_start, new_count = row["span"]
            first_old = old_start if old_count else old_start + 1
            first_new = new_start if new_count else new_start + 1
            add(at, old_last + 1, first_old - 1, first_new - first_old, "above" if not in_body else "between")
            old_last = old_start + old_count - 1 if old_count else old_start
            new_last = new_start + new_count - 1 if new_count else new_start
            in_body = True
    if in_body and path in known:
        add(len(rows), old_last + 1, len(known[path]), new_last - old_last, "below")
    return found


def with_gaps(rows: list[dict[str, Any]], files: list[DiffFile], sources: dict[str, str]) -> list[dict[str, Any]]:
    out = list(rows)
    for at, gap in reversed(gaps_of(rows, files, sources)):
        out.insert(at, {"type": "expand", "gap": gap})
    return out


class ContextRefused(Exception):
    """Lines that cannot be shown around this diff, in words."""


# How many lines one request reveals at most (the page asks for 20 at a time).
EXPAND_MAX_LINES = 500


def context_lines(diff: str, sources: dict[str, str], path: str, start: int, end: int) -> list[dict[str, Any]]:
    """Lines ``start`` to ``end`` of ``path``'s old side, inside one gap of the diff,
    from the request's own sources: each with its old and new number and its syntax
    pieces ``[class, text]`` (the page sets them as text: it parses no markup). A
    hidden character is a piece of its own, ``["hidden", mark, its name]``, which the
    page shows as the diff's own lines show it (core.visible): marked here, not there."""
    rows = parse(diff or "")
    files = files_of(rows)
    gap = next((g for _, g in gaps_of(rows, files, sources) if g.path == path and g.start <= start <= end <= g.end), None)
    if gap is None:
        raise ContextRefused(f"lines {start} to {end} of {path[:200]!r} are not lines this diff leaves out")
    if end - start >= EXPAND_MAX_LINES:
        raise ContextRefused(f"at most {EXPAND_MAX_LINES} lines at a time")
    texts = source_lines(sources[path])[start - 1 : end]
    lexer = lexer_for(path)
    pieces = lexed_lines(lexer, texts) if lexer is not None else [[("", text)] for text in texts]
    return [
        {"old": number, "new": number + gap.offset, "pieces": [shown for kind, value in line for shown in _context_pieces(kind, value)]}
        for number, line in enumerate(pieces, start)
    ]


def _context_pieces(kind: str, value: str) -> list[list[str]]:
    return [["hidden", mark(part), char_name(part)] if hidden else [kind, part] for part, hidden in split_hidden(value)]


def _expand_html(gap: Gap, columns: int) -> SafeString:
    """The row that reveals a gap: its buttons (above a hunk: the lines nearest to it
    first; after the last: the next ones down; between: both), drawn by the page's
    script (static/js/diff_context.js), which shows the buttons and names what each
    reveals; without it the row says only how many lines are hidden."""
    ways = {"above": ["up"], "below": ["down"], "between": ["down", "up"]}[gap.where]
    buttons = format_html_join(
        "",
        '<button type="button" class="btn btn-ghost btn-small" data-expand="{}" hidden>{} Show more</button>',
        ((way, "↓" if way == "down" else "↑") for way in ways),
    )
    return format_html(
        '<tr class="d-expand" data-gap="{}" data-path="{}" data-start="{}" data-end="{}"><td class="code" colspan="{}">{} '
        '<span class="expand-left" aria-live="polite">{} unchanged lines hidden</span></td></tr>\n',
        gap.index,
        gap.path,
        gap.start,
        gap.end,
        columns,
        buttons,
        gap.end - gap.start + 1,
    )


def colour(rows: list[dict[str, Any]]) -> None:
    """Give each line of a file whose language Pygments knows its pieces: each side
    of the file (old: context and removed lines, new: context and added) lexed once."""
    sides: dict[tuple[str, str], list[Line]] = {}
    for row in rows:
        if row["type"] != "pair":
            continue
        old, new = row["old"], row["new"]
        if old is not None and old is not new:
            sides.setdefault((old.path, "old"), []).append(old)
        if new is not None:
            sides.setdefault((new.path, "new"), []).append(new)
    for (path, _), lines in sides.items():
        lexer = lexer_for(path) if path else None
        if lexer is not None:
            for line, pieces in zip(lines, lexed_lines(lexer, [line.text for line in lines]), strict=True):
                line.pieces = pieces


def _code(line: Line) -> SafeString:
    """A line's code cell: coloured when its pieces are known, the changed parts marked."""
    if line.pieces:
        return highlighted(line.pieces, line.segments)
    return _joined_html(
        format_html('<span class="x">{}</span>', _shown(text)) if changed else _shown(text) for text, changed in line.segments
    )


# SafeString itself rather than mark_safe, whose lazy-aware wrapper costs 3 us a call
# on every line of the diff.
def _shown(text: str) -> SafeString:
    return SafeString(visible_html(text))  # escaped, hidden characters marked (core.visible)


def _joined_html(parts: Iterable[SafeString]) -> SafeString:
    return SafeString("".join(parts))  # each part is already safe HTML


def _anchor(row: dict[str, Any], suffix: str = "") -> SafeString:
    return format_html(' id="diff-file-{}{}"', row["anchor"], suffix) if "anchor" in row else mark_safe("")


# format_html escapes what is not already safe through Django's lazy-aware escape,
# 3 us a call: a diff's numbers and classes go in as safe strings made once.
@cache
def _number(value: int | None) -> SafeString:
    return mark_safe("" if value is None else str(value))  # noqa: S308 - digits


_CLASS = {kind: mark_safe(kind) for kind in ("add", "del", "ctx", "file", "hunk", "meta")}  # noqa: S308 - constants


def _unified_html(rows: list[dict[str, Any]]) -> SafeString:
    out = []
    for row in rows:
        if row["type"] == "expand":
            out.append(_expand_html(row["gap"], 4))
        elif row["type"] == "line":
            line = row["line"]
            out.append(
                format_html(
                    '<tr class="d-{}"><td class="ln">{}</td><td class="ln">{}</td><td class="mark">{}</td><td class="code">{}</td></tr>\n',
                    _CLASS[line.kind],
                    _number(line.old_no),
                    _number(line.new_no),
                    MARKS[line.kind],
                    _code(line),
                )
            )
            if line.comments:
                out.append(_comments_html(line.comments, 4, placed=True))
        else:
            out.append(
                format_html(
                    '<tr class="d-{}"{}><td class="ln"></td><td class="ln"></td><td class="mark"></td><td class="code">{}</td></tr>\n',
                    _CLASS[row["type"]],
                    _anchor(row),
                    _shown(row["text"]),
                )
            )
            if row.get("comments"):
                out.append(_comments_html(row["comments"], 4, placed=False))
    return _joined_html(out)


_NONE = ("", mark_safe("none"), "")


def _side(line: Line | None, number: int | None) -> tuple[SafeString | str, SafeString, SafeString | str]:
    """One side's number, class and code (a side with no line: empty, ``d-none``)."""
    return _NONE if line is None else (_number(number), _CLASS[line.kind], _code(line))


def _split_html(rows: list[dict[str, Any]]) -> SafeString:
    out = []
    for row in rows:
        if row["type"] == "expand":
            out.append(_expand_html(row["gap"], 4))
        elif row["type"] == "pair":
            old, new = row["old"], row["new"]
            out.append(
                format_html(
                    '<tr><td class="ln">{}</td><td class="code d-{}">{}</td><td class="ln">{}</td><td class="code d-{}">{}</td></tr>\n',
                    *_side(old, old.old_no if old else None),
                    *_side(new, new.new_no if new else None),
                )
            )
            if new is not None and new.comments:
                out.append(_comments_html(new.comments, 4, placed=True))
        else:
            out.append(
                format_html(
                    '<tr class="d-{}"{}><td class="ln"></td><td class="code" colspan="3">{}</td></tr>\n',
                    _CLASS[row["type"]],
                    _anchor(row, "-split"),
                    _shown(row["text"]),
                )
            )
            if row.get("comments"):
                out.append(_comments_html(row["comments"], 4, placed=False))
    return _joined_html(out)
