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
from typing import NamedTuple

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


class PatchLine(NamedTuple):
    """One line of a diff as the applier reads it (``read_patch``).

    ``kind``: ``added``, ``removed`` or ``context`` (a hunk's line; ``text`` without its
    first character), ``no_newline`` (the marker after a hunk's line), ``hunk`` (its
    header; ``span`` is its old start and count and new start and count),
    ``old_header``/``new_header`` (``named``: the path that header names, as the
    applier writes it, None for /dev/null), or ``other`` (commentary, ``diff --git``,
    ``index`` and the like, which the applier passes over). ``path``: the file the line
    belongs to ("" before the first). ``old_no``/``new_no``: its number in the old and
    new file, on the sides it is on. ``problem``: why the applier refuses the patch
    at this line, in the words ``parse_patch`` raises."""

    number: int
    kind: str
    text: str
    path: str = ""
    old_no: int | None = None
    new_no: int | None = None
    named: str | None = None
    span: tuple[int, int, int, int] | None = None
    problem: str | None = None


_OP_OF = {"context": " ", "removed": "-", "added": "+"}


def _read_header(line: str, number: int) -> tuple[str | None, str | None]:
    """The path a ``---``/``+++`` line names (None: /dev/null), and why the applier
    refuses it, if it does; a refused name is still read as far as it goes, to show."""
    try:
        name = header_name(line[4:])
    except PatchRefused as exc:
        return line[4:].split("\t", 1)[0].strip(" "), f"line {number}: {exc}"
    if name == DEV_NULL:
        return None, None
    if name.startswith(("a/", "b/")):
        name = name[2:]
    try:
        return canonical_path(name), None
    except PathRefused as exc:
        return name, f"line {number}: {exc}"


def read_patch(text: str) -> list[PatchLine]:
    """Every line of a unified diff as the applier reads it: the one reader of diff
    text. ``parse_patch`` (what the applier writes and the validator checks) is built
    on it; the reviewer's diff view (pages.diff_view), the hidden-character warning
    (core.visible) and any scan of a change read it too, so what is shown, scanned
    and applied cannot disagree about which line is a header, a hunk's line or mere
    commentary, or which file and line number a line has.

    It never refuses: a line where the applier would refuse the patch carries the
    reason (``problem``), and reading goes on as far as it can, so a refused diff can
    still be shown. Lines end at ``"\\n"`` only."""
    raw = text.split("\n")
    if raw and raw[-1] == "":
        raw.pop()
    out: list[PatchLine] = []
    seen: set[str] = set()
    path = ""
    i = 0
    while i < len(raw):
        line, number = raw[i], i + 1
        unsupported = next((what for prefix, what in _UNSUPPORTED.items() if line.startswith(prefix)), None)
        if unsupported is not None:
            out.append(
                PatchLine(number, "other", line, path, problem=f"line {number}: {unsupported} are not supported ({line.strip()[:80]!r})")
            )
            i += 1
            continue
        if not line.startswith("--- "):
            out.append(PatchLine(number, "other", line, path))  # commentary, "diff --git", "index ..." and the like
            i += 1
            continue
        if i + 1 >= len(raw) or not raw[i + 1].startswith("+++ "):
            out.append(PatchLine(number, "other", line, path, problem=f"line {number}: '--- ' header is not followed by a '+++ ' header"))
            i += 1
            continue
        i = _read_file(raw, i, out, seen)
        path = out[-1].path if out else path
    return out


def _read_file(raw: list[str], i: int, out: list[PatchLine], seen: set[str]) -> int:
    """A file's two header lines at ``i`` and the hunks after them; where reading
    goes on."""
    number = i + 1
    old, old_problem = _read_header(raw[i], number)
    new, new_problem = _read_header(raw[i + 1], number + 1)
    path = new if new is not None else old if old is not None else ""
    problem = new_problem
    if old is None and new is None:
        problem = problem or f"line {number}: both sides are /dev/null"
    elif old is not None and new is not None and old != new:
        problem = problem or f"line {number}: renames are not supported ({old} -> {new})"
    elif path in seen:
        problem = problem or f"{path}: the patch changes this file twice"
    seen.add(path)
    i += 2
    if not (i < len(raw) and raw[i].startswith("@@")):
        problem = problem or f"{path}: no hunks ('@@ -a,b +c,d @@') after the file headers"
    out.append(PatchLine(number, "old_header", raw[number - 1], path, named=old, problem=old_problem))
    out.append(PatchLine(number + 1, "new_header", raw[number], path, named=new, problem=problem))
    hunks = 0
    while i < len(raw) and raw[i].startswith("@@"):
        hunks += 1
        i, whole = _read_hunk(raw, i, path, hunks, out)
        if not whole:
            break
    return i


def _read_hunk(raw: list[str], i: int, path: str, number: int, out: list[PatchLine]) -> tuple[int, bool]:
    """The hunk at ``i``: where reading goes on, and whether the hunk was whole (a
    refused line ends it, and is left to be read as commentary)."""
    match = _HUNK_HEADER.match(raw[i])
    if match is None:
        out.append(PatchLine(i + 1, "other", raw[i], path, problem=f"{path}: hunk {number} has a malformed header {raw[i]!r}"))
        return i + 1, False
    old_start, new_start = int(match.group(1)), int(match.group(3))
    old_count = 1 if match.group(2) is None else int(match.group(2))
    new_count = 1 if match.group(4) is None else int(match.group(4))
    header = f"@@ -{old_start},{old_count} +{new_start},{new_count} @@"
    out.append(PatchLine(i + 1, "hunk", raw[i], path, old_start, new_start, span=(old_start, old_count, new_start, new_count)))
    i += 1
    old_seen = new_seen = 0
    first = len(out)
    while old_seen < old_count or new_seen < new_count:
        if i >= len(raw):
            if out[-1].problem is None:
                out[-1] = out[-1]._replace(problem=f"{path}: hunk {number} ({header}) ends early: the patch is truncated")
            return i, False
        line = raw[i]
        op, text = (line[0], line[1:]) if line else (" ", "")  # editors strip a blank context line's space
        if op == "\\":
            out.append(_no_newline(i, line, path, number, len(out) > first))
            i += 1
            continue
        if op not in " -+":
            problem = f"{path}: hunk {number} ({header}) line {i + 1} starts with {op!r}; expected ' ', '-' or '+' (the hunk's line counts may be wrong)"
            return i + 1, _refused(out, i, line, path, problem)
        # One branch a kind, the commonest first: this loop is most of a large patch's reading.
        if op == "+" and new_seen < new_count:
            out.append(PatchLine(i + 1, "added", text, path, None, new_start + new_seen))
            new_seen += 1
        elif op == "-" and old_seen < old_count:
            out.append(PatchLine(i + 1, "removed", text, path, old_start + old_seen))
            old_seen += 1
        elif op == " " and old_seen < old_count and new_seen < new_count:
            out.append(PatchLine(i + 1, "context", text, path, old_start + old_seen, new_start + new_seen))
            old_seen += 1
            new_seen += 1
        else:
            return i + 1, _refused(out, i, line, path, f"{path}: hunk {number} ({header}) has more lines than its header counts")
        i += 1
    while i < len(raw) and raw[i].startswith("\\"):
        out.append(_no_newline(i, raw[i], path, number, len(out) > first))
        i += 1
    return i, True


def _no_newline(i: int, line: str, path: str, number: int, after_a_line: bool) -> PatchLine:
    problem = None if after_a_line else f"{path}: hunk {number} starts with a 'No newline' marker"
    return PatchLine(i + 1, "no_newline", line, path, problem=problem)


def _refused(out: list[PatchLine], i: int, line: str, path: str, problem: str) -> bool:
    out.append(PatchLine(i + 1, "other", line, path, problem=problem))
    return False


def parse_patch(text: str) -> list[FilePatch]:
    """The files a patch changes and their hunks, as the applier writes them;
    PatchRefused with the first problem ``read_patch`` found."""
    lines = read_patch(text)
    problem = next((line.problem for line in lines if line.problem is not None), None)
    if problem is not None:
        raise PatchRefused(problem)
    patches: list[FilePatch] = []
    old: str | None = None
    hunk: list[tuple[str, str, bool]] = []
    for line in lines:
        op = _OP_OF.get(line.kind)
        if op is not None:
            hunk.append((op, line.text, True))
        elif line.kind == "old_header":
            old = line.named
        elif line.kind == "new_header":
            patches.append(FilePatch(old, line.named))
        elif line.kind == "hunk":
            assert line.span is not None
            patches[-1].hunks.append(Hunk(len(patches[-1].hunks) + 1, *line.span))
            hunk = patches[-1].hunks[-1].lines
        elif line.kind == "no_newline":
            hunk[-1] = (hunk[-1][0], hunk[-1][1], False)
    if not patches:
        raise PatchRefused("no '--- a/...' / '+++ b/...' file headers found")
    return patches


def patch_targets(text: str) -> list[str]:
    """The files a patch touches, in order, exactly as the applier will write them."""
    return [patch.path for patch in parse_patch(text)]


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
