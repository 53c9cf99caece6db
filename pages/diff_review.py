"""What a diff is reviewed with beyond its lines: the files it touches (each with its
status and counts, for the file tree) and syntax highlighting, done here on the server
with Pygments, every piece of text escaped as it goes into the HTML."""

from __future__ import annotations

import fnmatch
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache, lru_cache
from pathlib import PurePosixPath

from django.utils.html import format_html
from django.utils.safestring import SafeString
from pygments.lexer import Lexer
from pygments.lexers import get_all_lexers, get_lexer_by_name
from pygments.token import STANDARD_TYPES
from pygments.util import ClassNotFound

from core.patchtext import DEV_NULL
from core.visible import visible_html

# Past this many lines a diff is shown without colours, so that the page of a long
# diff still comes at once (docs/performance-history.md, "Diff colours").
HIGHLIGHT_MAX_LINES = 1000


@dataclass
class DiffFile:
    """One file of the diff: ``status`` added, deleted, renamed or modified; ``index``
    its place in the diff, which its header row's id names."""

    index: int
    path: str
    old_path: str
    status: str
    added: int = 0
    removed: int = 0


def file_status(old: str, new: str) -> str:
    if old == DEV_NULL:
        return "added"
    if new == DEV_NULL:
        return "deleted"
    return "modified" if old == new else "renamed"


@lru_cache(maxsize=256)
def lexer_for(path: str) -> Lexer | None:
    """The lexer for a file's name, or None (no colours) for a name Pygments does not
    know. Looked up in Pygments' own table only: its ``get_lexer_for_filename`` also
    scans every installed package for plugins, seconds on a first page."""
    name = PurePosixPath(path).name
    for _name, aliases, patterns, _mimetypes in get_all_lexers(plugins=False):
        if aliases and any(fnmatch.fnmatchcase(name, pattern) for pattern in patterns):
            try:
                return get_lexer_by_name(aliases[0], stripnl=False, ensurenl=False, tabsize=0)
            except ClassNotFound:
                return None
    return None


# Pygments' short class names by token type, a token type being the tuple of its
# names (Token.Name.Function is ("Name", "Function")).
_CLASSES: dict[tuple[str, ...], str] = {tuple(kind): name for kind, name in STANDARD_TYPES.items()}


@cache  # a language has a few dozen token types; a diff has thousands of tokens
def _css_class(token: tuple[str, ...]) -> str:
    """The short class of a token type or of its nearest ancestor that has one, or ""
    for plain text and white space (no colour, fewer bytes)."""
    name = next((_CLASSES[token[:end]] for end in range(len(token), -1, -1) if token[:end] in _CLASSES), "")
    return "" if name == "w" else name


def lexed_lines(lexer: Lexer, texts: list[str]) -> list[list[tuple[str, str]]]:
    """Each line's (class, text) pieces, the lines lexed together as one text (one
    pass a side of a file, and a string or comment that spans lines is read as one);
    plain pieces when the lexer changed the text, so what is shown is always exactly
    the diff's lines."""
    whole = "\n".join(texts)
    lines: list[list[tuple[str, str]]] = [[]]
    for kind, value in lexer.get_tokens(whole):
        name = _css_class(kind)
        first, *rest = value.split("\n")
        if first:
            lines[-1].append((name, first))
        for part in rest:
            lines.append([(name, part)] if part else [])
    if len(lines) != len(texts) or any("".join(v for _, v in pieces) != text for pieces, text in zip(lines, texts, strict=True)):
        return [[("", text)] for text in texts]
    return lines


def _cut(pieces: list[tuple[str, str]], segments: list[tuple[str, bool]]) -> Iterator[tuple[str, str, bool]]:
    """The line as (class, text, changed) runs: the tokens cut where a changed part
    (a modified line's intraline mark) begins or ends."""
    queue = list(pieces)
    for text, changed in segments:
        left = len(text)
        while left and queue:
            kind, value = queue[0]
            if len(value) <= left:
                queue.pop(0)
                yield kind, value, changed
                left -= len(value)
            else:
                yield kind, value[:left], changed
                queue[0] = (kind, value[left:])
                left = 0


def highlighted(pieces: list[tuple[str, str]], segments: list[tuple[str, bool]]) -> SafeString:
    """One line's HTML: token classes (``tok-…``) inside the changed-part marks, the
    text escaped and its hidden characters marked (core.visible)."""
    html = []
    for kind, value, changed in _cut(pieces, segments):
        text = SafeString(visible_html(value))  # escaped, hidden characters marked
        piece = format_html('<span class="tok-{}">{}</span>', kind, text) if kind else text
        html.append(format_html('<span class="x">{}</span>', piece) if changed else piece)
    return SafeString("".join(html))  # each part is safe HTML


# -- line comments ---------------------------------------------------------------------

MAX_LINE_COMMENTS = 50
LINE_COMMENT_CHARS = 1000
# The reviewer's whole message to the model, their words and line comments together.
FEEDBACK_CHARS = 4000


@dataclass(frozen=True)
class LineComment:
    path: str
    line: int
    text: str


def check_line_comments(paths: list[str], lines: list[str], texts: list[str], files: list[DiffFile]) -> tuple[list[LineComment], list[str]]:
    """The comments a reviewer left on lines of the diff (the form's three parallel
    lists), and every problem with them at once: a file the diff does not change, a
    line that is not a number, an empty or overlong comment, too many."""
    problems: list[str] = []
    if not len(paths) == len(lines) == len(texts):
        return [], ["the line comments came incomplete: each needs its file, line and words"]
    if len(paths) > MAX_LINE_COMMENTS:
        problems.append(f"at most {MAX_LINE_COMMENTS} line comments (there are {len(paths)})")
    known = {f.path for f in files}
    comments = []
    for number, (path, line, text) in enumerate(zip(paths, lines, texts, strict=True), start=1):
        text = text.strip()
        where = f"line comment {number}"
        if path not in known:
            problems.append(f"{where}: {path[:200]!r} is not a file this diff changes")
        if not line.isdigit() or int(line) < 1:
            problems.append(f"{where}: the line must be a number from 1 (it is {line[:20]!r})")
        if not text:
            problems.append(f"{where}: write the words for the model")
        elif len(text) > LINE_COMMENT_CHARS:
            problems.append(f"{where}: at most {LINE_COMMENT_CHARS} characters (it has {len(text)})")
        if not problems:
            comments.append(LineComment(path, int(line), text))
    return (comments if not problems else []), problems


def stored_comments(comments: list[LineComment]) -> list[dict[str, object]]:
    """The comments as a request for changes keeps them (ApprovalRequest.comments)."""
    return [{"file": c.path, "line": c.line, "text": c.text} for c in comments]


def requested_changes(reason: str, comments: list[dict[str, object]]) -> dict[str, object]:
    """A request for changes as the pages show it: the reviewer's own words and each
    line comment on its own, anchored to its file and line. ``reason`` holds both as the
    model read them (feedback_text); a request decided before comments were kept apart
    has none, and its reason is shown whole."""
    kept = [LineComment(str(c.get("file", "")), int(str(c.get("line", 0))), str(c.get("text", ""))) for c in comments]
    listed = feedback_text("", kept) if kept else ""
    words = reason
    if listed and reason == listed:
        words = ""
    elif listed and reason.endswith("\n\n" + listed):
        words = reason[: -len(listed) - 2]
    return {"words": words, "comments": kept}


def feedback_text(message: str, comments: list[LineComment]) -> str:
    """What the model reads: the reviewer's words, then each line comment naming its
    file and line (the diff's new side), in the order they were left."""
    parts = [message.strip()] if message.strip() else []
    if comments:
        listed = "\n".join(f"- {c.path}, line {c.line}: {c.text}" for c in comments)
        parts.append(f"Comments on lines of the diff:\n{listed}")
    return "\n\n".join(parts)
