"""Unified diffs for people: line numbers, added / removed colouring, the changed
part of a modified line marked, syntax colours and the list of files
(pages.diff_review), and a side-by-side layout. The table rows are built here, not
in a template loop (which took seconds for tens of thousands of lines), and every
piece of text is escaped as it goes in."""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field
from html import escape
from typing import Any

from django import template
from django.utils.safestring import mark_safe

from common.redact import MASK
from core.patchtext import DEV_NULL
from pages import diff_review
from pages.diff_review import DiffFile, file_status, header_path, highlighted, lexed_lines, lexer_for

register = template.Library()

HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@(.*)$")
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


def parse(diff: str) -> list[dict[str, Any]]:
    """Rows of a unified diff: ``file`` / ``hunk`` / ``meta`` headers and paired lines
    (``pair``: removed, added or context on both sides)."""
    rows: list[dict[str, Any]] = []
    removed: list[Line] = []
    added: list[Line] = []
    old_left = new_left = 0
    old_no = new_no = 0

    def flush() -> None:
        for old, new in _pair_block(removed, added):
            rows.append({"type": "pair", "old": old, "new": new})
        removed.clear()
        added.clear()

    # A diff's lines end at "\n" only (core.patchtext): splitlines() would also
    # split at "\r", U+2028 and the like inside a line, and misnumber the rest.
    lines = diff.split("\n")
    if lines[-1] == "":
        lines.pop()
    for raw in lines:
        # Inside a hunk the counts say which lines belong to it, so a removed line
        # that starts with "--" is not mistaken for a file header.
        if old_left > 0 or new_left > 0:
            marker, text = raw[:1], raw[1:]
            if marker == "-":
                removed.append(Line("del", text, old_no=old_no))
                old_no, old_left = old_no + 1, old_left - 1
                continue
            if marker == "+":
                added.append(Line("add", text, new_no=new_no))
                new_no, new_left = new_no + 1, new_left - 1
                continue
            if marker in (" ", ""):
                flush()
                line = Line("ctx", text, old_no=old_no, new_no=new_no)
                rows.append({"type": "pair", "old": line, "new": line})
                old_no, new_no, old_left, new_left = old_no + 1, new_no + 1, old_left - 1, new_left - 1
                continue
        flush()
        hunk = HUNK.match(raw)
        if hunk:
            old_no, new_no = int(hunk.group(1)), int(hunk.group(3))
            old_left = int(hunk.group(2)) if hunk.group(2) is not None else 1
            new_left = int(hunk.group(4)) if hunk.group(4) is not None else 1
            rows.append({"type": "hunk", "text": raw, "span": (old_no, old_left, new_no, new_left)})
        elif raw.startswith(("--- ", "+++ ", "diff ")):
            rows.append({"type": "file", "text": raw})
        else:
            rows.append({"type": "meta", "text": raw})
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
    """The files the diff's headers name, each with its counts; each line learns its
    file, and each file's ``+++`` row its place (``anchor``), which the tree links to."""
    files: list[DiffFile] = []
    old = ""
    current: DiffFile | None = None
    for row in rows:
        if row["type"] == "file" and row["text"].startswith("--- "):
            old = header_path(row["text"])
        elif row["type"] == "file" and row["text"].startswith("+++ "):
            new = header_path(row["text"])
            current = DiffFile(len(files), old if new == DEV_NULL else new, old, file_status(old, new))
            row["anchor"] = current.index
            files.append(current)
        elif row["type"] == "pair" and current is not None:
            for side in {id(row["old"]): row["old"], id(row["new"]): row["new"]}.values():
                if side is not None:
                    side.path = current.path
            current.added += row["new"] is not None and row["new"].kind == "add"
            current.removed += row["old"] is not None and row["old"].kind == "del"
    return files


def masked_lines(diff: str) -> list[tuple[str, int]]:
    """(file, number of its diff lines showing MASK), for each file that has any."""
    counts: dict[str, int] = {}
    rows = parse(diff or "")
    files_of(rows)
    for row in rows:
        if row["type"] == "pair":
            sides = [row["old"]] if row["old"] is row["new"] else [row["old"], row["new"]]
            masked = sum(1 for line in sides if line is not None and MASK in line.text)
            if masked:
                path = (row["old"] or row["new"]).path
                counts[path] = counts.get(path, 0) + masked
    return list(counts.items())


@register.filter
def diff_rows(diff: str, sources: dict[str, str] | str = "") -> dict[str, Any]:
    """The diff's tables, rendered here rather than in a template loop: a diff of tens
    of thousands of lines took the template seconds per page (docs/performance.md).
    Every piece of text is escaped on its way in (``_code``, ``escape``). With the
    request's ``sources``, each stretch of a file the diff leaves out gets a row to
    expand it (``with_gaps``)."""
    rows = parse(diff or "")
    files = files_of(rows)
    added = sum(1 for r in rows if r["type"] == "pair" and r["new"] is not None and r["new"].kind == "add")
    removed = sum(1 for r in rows if r["type"] == "pair" and r["old"] is not None and r["old"].kind == "del")
    if len(rows) <= diff_review.HIGHLIGHT_MAX_LINES:
        colour(rows)
    if isinstance(sources, dict) and sources:
        rows = with_gaps(rows, files, sources)
    return {
        "split": mark_safe(_split_html(rows)),  # noqa: S308 - built from escaped text
        "unified": mark_safe(_unified_html(_unified(rows))),  # noqa: S308 - as above
        "added": added,
        "removed": removed,
        "files": files,
    }


MARKS = {"add": "+", "del": "\u2212", "ctx": ""}


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
    pieces ``[class, text]`` (the page sets them as text: it parses no markup)."""
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
        {"old": number, "new": number + gap.offset, "pieces": [[kind, value] for kind, value in line]}
        for number, line in enumerate(pieces, start)
    ]


def _expand_html(gap: Gap, columns: int) -> str:
    """The row that reveals a gap: its buttons (above a hunk: the lines nearest to it
    first; after the last: the next ones down; between: both), drawn by the page's
    script (static/js/diff_context.js), which shows the buttons and names what each
    reveals; without it the row says only how many lines are hidden."""
    ways = {"above": ["up"], "below": ["down"], "between": ["down", "up"]}[gap.where]
    buttons = "".join(
        f'<button type="button" class="btn btn-ghost btn-small" data-expand="{way}" hidden>{"↓" if way == "down" else "↑"} Show more</button>'
        for way in ways
    )
    return (
        f'<tr class="d-expand" data-gap="{gap.index}" data-path="{escape(gap.path)}" data-start="{gap.start}" data-end="{gap.end}">'
        f'<td class="code" colspan="{columns}">{buttons} <span class="expand-left" aria-live="polite">{gap.end - gap.start + 1} unchanged lines hidden</span></td></tr>\n'
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


def _code(line: Line) -> str:
    """A line's code cell: coloured when its pieces are known, the changed parts marked."""
    if line.pieces:
        return highlighted(line.pieces, line.segments)
    return "".join(f'<span class="x">{escape(text)}</span>' if changed else escape(text) for text, changed in line.segments)


def _anchor(row: dict[str, Any], suffix: str = "") -> str:
    return f' id="diff-file-{row["anchor"]}{suffix}"' if "anchor" in row else ""


def _number(value: int | None) -> str:
    return "" if value is None else str(value)


def _unified_html(rows: list[dict[str, Any]]) -> str:
    out = []
    for row in rows:
        if row["type"] == "expand":
            out.append(_expand_html(row["gap"], 4))
        elif row["type"] == "line":
            line = row["line"]
            out.append(
                f'<tr class="d-{line.kind}"><td class="ln">{_number(line.old_no)}</td><td class="ln">{_number(line.new_no)}</td>'
                f'<td class="mark">{MARKS[line.kind]}</td><td class="code">{_code(line)}</td></tr>\n'
            )
        else:
            out.append(
                f'<tr class="d-{row["type"]}"{_anchor(row)}><td class="ln"></td><td class="ln"></td><td class="mark"></td>'
                f'<td class="code">{escape(row["text"])}</td></tr>\n'
            )
    return "".join(out)


def _side(line: Line | None, number: int | None) -> str:
    if line is None:
        return '<td class="ln"></td><td class="code d-none"></td>'
    return f'<td class="ln">{_number(number)}</td><td class="code d-{line.kind}">{_code(line)}</td>'


def _split_html(rows: list[dict[str, Any]]) -> str:
    out = []
    for row in rows:
        if row["type"] == "expand":
            out.append(_expand_html(row["gap"], 4))
        elif row["type"] == "pair":
            old, new = row["old"], row["new"]
            out.append(f"<tr>{_side(old, old.old_no if old else None)}{_side(new, new.new_no if new else None)}</tr>\n")
        else:
            out.append(
                f'<tr class="d-{row["type"]}"{_anchor(row, "-split")}><td class="ln"></td><td class="code" colspan="3">{escape(row["text"])}</td></tr>\n'
            )
    return "".join(out)
