"""The one reader of a unified diff's text, for the validator (which paths a patch
touches, checked against the write paths) and the applier alike: whatever one of
them takes as a file header, a path or a hunk line, so does the other.

Lines end at ``"\\n"`` only (never at ``\\r``, ``\\x1c``-``\\x1e``, ``\\x85``, U+2028 or
U+2029, which ``str.splitlines`` also splits on); a header's path is what follows
``--- ``/``+++ `` up to a tab, without surrounding spaces and without an ``a/``/``b/``
prefix, and must pass ``canonical_path``. Text is ``str``; bytes that are not UTF-8
arrive as ``surrogateescape`` characters and simply never match."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from core.paths import PathRefused, canonical_path

DEV_NULL = "/dev/null"
_HUNK_HEADER = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
# Extended git headers whose meaning the applier does not implement; refusing them
# is better than silently applying half of what the author meant.
_UNSUPPORTED = {
    "rename from": "renames",
    "rename to": "renames",
    "copy from": "copies",
    "copy to": "copies",
    "old mode": "mode changes",
    "new mode": "mode changes",
    "GIT binary patch": "binary patches",
    "Binary files": "binary patches",
}

Line = tuple[str, bool]  # text without its line break, and whether a "\n" followed it


class PatchRefused(ValueError):
    """The patch cannot be parsed or does not apply; the message names file and hunk."""


@dataclass
class Hunk:
    number: int
    old_start: int
    old_count: int
    new_start: int
    new_count: int
    lines: list[tuple[str, str, bool]] = field(default_factory=list)  # (op, text, newline)

    @property
    def header(self) -> str:
        return f"@@ -{self.old_start},{self.old_count} +{self.new_start},{self.new_count} @@"

    @property
    def old(self) -> list[Line]:
        return [(text, nl) for op, text, nl in self.lines if op in " -"]

    @property
    def new(self) -> list[Line]:
        return [(text, nl) for op, text, nl in self.lines if op in " +"]


@dataclass
class FilePatch:
    old_path: str | None  # None: the file is created
    new_path: str | None  # None: the file is deleted
    hunks: list[Hunk] = field(default_factory=list)

    @property
    def path(self) -> str:
        path = self.new_path if self.new_path is not None else self.old_path
        assert path is not None
        return path


def split_lines(text: str) -> list[Line]:
    lines = text.split("\n")
    result: list[Line] = [(line, True) for line in lines[:-1]]
    if lines[-1] != "":
        result.append((lines[-1], False))
    return result


def join_lines(lines: Sequence[Line]) -> str:
    return "".join(text + ("\n" if nl else "") for text, nl in lines)


# C-style quoting of a name in a header, as git writes it: a name holding a quote, a
# backslash, a control character or a byte outside ASCII is written in double quotes
# with escapes, and one holding a space is followed by a tab, so that `git apply`
# and GNU `patch` both read the whole name (without the tab, `patch` stops at the space).
_ESCAPE_OF = {7: "a", 8: "b", 9: "t", 10: "n", 11: "v", 12: "f", 13: "r", 34: '"', 92: "\\"}
_BYTE_OF = {letter: byte for byte, letter in _ESCAPE_OF.items()}


def quoted_name(name: str) -> str:
    """``name`` (with its ``a/`` or ``b/``) as a header holds it."""
    data = name.encode("utf-8", "surrogateescape")
    if all(0x20 <= byte < 0x7F and byte not in (34, 92) for byte in data):
        return name
    out = []
    for byte in data:
        if byte in _ESCAPE_OF:
            out.append("\\" + _ESCAPE_OF[byte])
        elif 0x20 <= byte < 0x7F:
            out.append(chr(byte))
        else:
            out.append(f"\\{byte:03o}")
    return '"' + "".join(out) + '"'


def header_line(marker: str, name: str | None) -> str:
    """A ``---``/``+++`` line for ``name`` (with its prefix; None: /dev/null)."""
    if name is None:
        return f"{marker} {DEV_NULL}\n"
    return f"{marker} {quoted_name(name)}{chr(9) if ' ' in name else ''}\n"


def header_name(text: str) -> str:
    """The name a header line's text (after ``--- ``/``+++ ``) names, unquoted, with
    its prefix; PatchRefused for a quoted name that does not end or decode."""
    if not text.startswith('"'):
        return text.split("\t", 1)[0].strip(" ")
    data = bytearray()
    i = 1
    while i < len(text):
        char = text[i]
        if char == '"':
            return data.decode("utf-8", "surrogateescape")
        if char != "\\":
            data += char.encode("utf-8", "surrogateescape")
            i += 1
            continue
        escape = text[i + 1 : i + 2]
        if escape in _BYTE_OF:
            data.append(_BYTE_OF[escape])
            i += 2
        elif len(text) >= i + 4 and all(c in "01234567" for c in text[i + 1 : i + 4]) and int(text[i + 1 : i + 4], 8) < 256:
            data.append(int(text[i + 1 : i + 4], 8))
            i += 4
        else:
            raise PatchRefused(f"the quoted name {text[:80]!r} has an unknown escape {text[i : i + 2]!r}")
    raise PatchRefused(f"the quoted name {text[:80]!r} has no closing quote")


def _header_path(line: str, number: int) -> str | None:
    try:
        name = header_name(line[4:])
    except PatchRefused as exc:
        raise PatchRefused(f"line {number}: {exc}") from None
    if name == DEV_NULL:
        return None
    if name.startswith(("a/", "b/")):
        name = name[2:]
    try:
        return canonical_path(name)
    except PathRefused as exc:
        raise PatchRefused(f"line {number}: {exc}") from None


def parse_patch(text: str) -> list[FilePatch]:
    raw = text.split("\n")
    if raw and raw[-1] == "":
        raw.pop()
    patches: list[FilePatch] = []
    seen: set[str] = set()
    i = 0
    while i < len(raw):
        line = raw[i]
        for prefix, what in _UNSUPPORTED.items():
            if line.startswith(prefix):
                raise PatchRefused(f"line {i + 1}: {what} are not supported ({line.strip()[:80]!r})")
        if not line.startswith("--- "):
            i += 1  # commentary, "diff --git", "index ..." and the like
            continue
        if i + 1 >= len(raw) or not raw[i + 1].startswith("+++ "):
            raise PatchRefused(f"line {i + 1}: '--- ' header is not followed by a '+++ ' header")
        old_path, new_path = _header_path(line, i + 1), _header_path(raw[i + 1], i + 2)
        if old_path is None and new_path is None:
            raise PatchRefused(f"line {i + 1}: both sides are /dev/null")
        if old_path is not None and new_path is not None and old_path != new_path:
            raise PatchRefused(f"line {i + 1}: renames are not supported ({old_path} -> {new_path})")
        patch = FilePatch(old_path, new_path)
        if patch.path in seen:
            raise PatchRefused(f"{patch.path}: the patch changes this file twice")
        seen.add(patch.path)
        i += 2
        while i < len(raw) and raw[i].startswith("@@"):
            hunk, i = _parse_hunk(raw, i, patch.path, len(patch.hunks) + 1)
            patch.hunks.append(hunk)
        if not patch.hunks:
            raise PatchRefused(f"{patch.path}: no hunks ('@@ -a,b +c,d @@') after the file headers")
        patches.append(patch)
    if not patches:
        raise PatchRefused("no '--- a/...' / '+++ b/...' file headers found")
    return patches


def patch_targets(text: str) -> list[str]:
    """The files a patch touches, in order, exactly as the applier will write them."""
    return [patch.path for patch in parse_patch(text)]


def _parse_hunk(raw: list[str], i: int, path: str, number: int) -> tuple[Hunk, int]:
    match = _HUNK_HEADER.match(raw[i])
    if match is None:
        raise PatchRefused(f"{path}: hunk {number} has a malformed header {raw[i]!r}")
    old_start, new_start = int(match.group(1)), int(match.group(3))
    old_count = 1 if match.group(2) is None else int(match.group(2))
    new_count = 1 if match.group(4) is None else int(match.group(4))
    hunk = Hunk(number, old_start, old_count, new_start, new_count)
    i += 1
    old_seen = new_seen = 0
    while old_seen < old_count or new_seen < new_count:
        if i >= len(raw):
            raise PatchRefused(f"{path}: hunk {number} ({hunk.header}) ends early: the patch is truncated")
        line = raw[i]
        op, text = (line[0], line[1:]) if line else (" ", "")  # editors strip a blank context line's space
        if op == "\\":
            _mark_no_newline(hunk, path)
            i += 1
            continue
        if op not in " -+":
            raise PatchRefused(
                f"{path}: hunk {number} ({hunk.header}) line {i + 1} starts with {op!r}; "
                f"expected ' ', '-' or '+' (the hunk's line counts may be wrong)"
            )
        if op in " -":
            old_seen += 1
        if op in " +":
            new_seen += 1
        if old_seen > old_count or new_seen > new_count:
            raise PatchRefused(f"{path}: hunk {number} ({hunk.header}) has more lines than its header counts")
        hunk.lines.append((op, text, True))
        i += 1
    while i < len(raw) and raw[i].startswith("\\"):
        _mark_no_newline(hunk, path)
        i += 1
    return hunk, i


def _mark_no_newline(hunk: Hunk, path: str) -> None:
    if not hunk.lines:
        raise PatchRefused(f"{path}: hunk {hunk.number} starts with a 'No newline' marker")
    op, text, _ = hunk.lines[-1]
    hunk.lines[-1] = (op, text, False)


# A preview that leaves out a file's changes says so on a line of its own (outside
# any hunk); such a preview is not the whole patch, so it cannot be granted as it is.
TOO_LARGE = "# too large to show: "
_PREVIEW_META = ("diff --git ", "new file mode ", "deleted file mode ", "index ", "#")


def preview_problem(text: str, mask: str) -> str | None:
    """Why a diff as a reviewer is shown it (after masking: ``mask`` stands for what
    was masked) is not exactly the patch it describes, or None. The writer of these
    diffs emits nothing but file headers, hunks whose lines match their counts, git's
    extended headers and ``#`` comments, so anything else means a line was lost or
    merged (masking across lines), and ``mask`` in a header means a file name is hidden."""
    raw = text.split("\n")
    if raw and raw[-1] == "":
        raw.pop()
    path = "(before the first file)"
    old_left = new_left = 0
    hunk = ""
    for number, line in enumerate(raw, start=1):
        if old_left > 0 or new_left > 0:
            op = line[:1]
            if op not in (" ", "-", "+", "\\"):
                return f"{path}: {hunk} shows fewer lines than it counts (line {number} of the diff is not one of them)"
            if op == "\\":
                continue
            old_left -= op in " -"
            new_left -= op in " +"
            if old_left < 0 or new_left < 0:
                return f"{path}: {hunk} shows more lines than it counts"
            continue
        if line.startswith(TOO_LARGE):
            return f"the diff leaves out changes: {line[2:]}"
        if line.startswith(("--- ", "+++ ", "diff --git ")) and mask in line:
            return f"a file name is masked (line {number} of the diff: {line!r})"
        if line.startswith(("--- ", "+++ ")):
            try:
                name = header_name(line[4:])
            except PatchRefused as exc:
                return f"line {number} of the diff: {exc}"
            path = path if name == DEV_NULL else name[2:]
            continue
        match = _HUNK_HEADER.match(line)
        if match is not None:
            hunk = match.group(0)
            old_left = 1 if match.group(2) is None else int(match.group(2))
            new_left = 1 if match.group(4) is None else int(match.group(4))
            continue
        if line.startswith("\\") or line.startswith(_PREVIEW_META):
            continue
        return f"line {number} of the diff is neither a header, a hunk's line nor a comment: {line[:80]!r}"
    if old_left > 0 or new_left > 0:
        return f"{path}: {hunk} ends before all the lines it counts"
    return None
