"""Unified diffs, pure Python: parsing a model's patch, applying it with exact
context (all or nothing), and producing diffs for reviewers and for publishing.

Text is handled as ``str`` decoded with ``surrogateescape`` so bytes that are not
UTF-8 survive a round trip unchanged; such lines simply never match a patch."""

from __future__ import annotations

import difflib
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from runs.core.paths import PathRefused, canonical_path

NO_NEWLINE = "\\ No newline at end of file"
DEV_NULL = "/dev/null"
_HUNK_HEADER = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
# Extended git headers whose meaning this applier does not implement; refusing them
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


def _header_path(line: str) -> str | None:
    """The same reading of ---/+++ headers as ``runs.core.paths.patch_targets``, so
    every path written here is one the harness validated against the write paths."""
    name = line[4:].split("\t", 1)[0].strip()
    if name == DEV_NULL:
        return None
    if name.startswith(("a/", "b/")):
        name = name[2:]
    try:
        return canonical_path(name)
    except PathRefused as exc:
        raise PatchRefused(f"{name}: {exc}") from None


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
                raise PatchRefused(f"line {i + 1}: {what} are not supported ({line.strip()!r})")
        if not line.startswith("--- "):
            i += 1  # commentary, "diff --git", "index ..." and the like
            continue
        if i + 1 >= len(raw) or not raw[i + 1].startswith("+++ "):
            raise PatchRefused(f"line {i + 1}: '--- ' header is not followed by a '+++ ' header")
        old_path, new_path = _header_path(line), _header_path(raw[i + 1])
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


def apply_hunks(patch: FilePatch, current: str | None) -> str | None:
    """The file's new text (None: deleted), or PatchRefused naming file and hunk."""
    path = patch.path
    if patch.old_path is None and current is not None:
        raise PatchRefused(f"{path}: the patch creates this file but it already exists")
    if patch.old_path is not None and current is None:
        raise PatchRefused(f"{path}: the file does not exist")
    lines = split_lines(current or "")
    out: list[Line] = []
    pos = 0
    for hunk in patch.hunks:
        old = hunk.old
        want = hunk.old_start - 1 if hunk.old_count > 0 else hunk.old_start
        at = _locate(lines, old, want, pos)
        if at is None:
            raise PatchRefused(f"{path}: hunk {hunk.number} ({hunk.header}) does not apply: {_mismatch(lines, old, want, pos)}")
        out.extend(lines[pos:at])
        out.extend(hunk.new)
        pos = at + len(old)
    out.extend(lines[pos:])
    if patch.new_path is None:
        if out:
            raise PatchRefused(f"{path}: the patch deletes the file but leaves {len(out)} line(s) in it")
        return None
    return join_lines(out)


def _locate(lines: list[Line], old: list[Line], want: int, pos: int) -> int | None:
    """Exact match at the stated line, else the nearest exact match after the
    previous hunk (line numbers from a model are often off; context never is)."""
    if not old:
        return want if pos <= want <= len(lines) else None
    last = len(lines) - len(old)
    if pos <= want <= last and lines[want : want + len(old)] == old:
        return want
    candidates = [p for p in range(pos, last + 1) if lines[p] == old[0] and lines[p : p + len(old)] == old]
    if not candidates:
        return None
    return min(candidates, key=lambda p: abs(p - want))


def _mismatch(lines: list[Line], old: list[Line], want: int, pos: int) -> str:
    if not old:
        return f"line {want} is outside the file ({len(lines)} lines)"
    start = max(pos, min(want, len(lines)))
    for offset, expected in enumerate(old):
        index = start + offset
        actual = lines[index] if index < len(lines) else None
        if actual != expected:
            got = "end of file" if actual is None else repr(actual[0]) + ("" if actual[1] else " (no newline at end)")
            return (
                f"context not found anywhere after line {pos}; at line {index + 1} expected "
                f"{expected[0]!r}{'' if expected[1] else ' (no newline at end)'}, found {got}"
            )
    return f"context not found after line {pos}"


def _range(start: int, stop: int) -> str:
    length = stop - start
    first = start + 1 if length else start
    return f"{first},{length}"


def unified_diff(path: str, old: str | None, new: str | None, context: int = 3) -> str:
    """A git-style diff of one file (None: absent), with exact 'No newline' markers
    so that ``apply_hunks`` reproduces ``new`` from ``old``."""
    if old == new:
        return ""
    a, b = split_lines(old or ""), split_lines(new or "")
    out = [f"diff --git a/{path} b/{path}\n"]
    if old is None:
        out.append("new file mode 100644\n")
    if new is None:
        out.append("deleted file mode 100644\n")
    out.append(f"--- {'a/' + path if old is not None else DEV_NULL}\n")
    out.append(f"+++ {'b/' + path if new is not None else DEV_NULL}\n")
    matcher = difflib.SequenceMatcher(None, a, b, autojunk=False)
    for group in matcher.get_grouped_opcodes(context):
        first, last = group[0], group[-1]
        out.append(f"@@ -{_range(first[1], last[2])} +{_range(first[3], last[4])} @@\n")
        for tag, i1, i2, j1, j2 in group:
            if tag == "equal":
                out.extend(_emit(" ", a[i1:i2]))
                continue
            if tag in ("replace", "delete"):
                out.extend(_emit("-", a[i1:i2]))
            if tag in ("replace", "insert"):
                out.extend(_emit("+", b[j1:j2]))
    return "".join(out)


def _emit(op: str, lines: Sequence[Line]) -> list[str]:
    out = []
    for text, nl in lines:
        out.append(f"{op}{text}\n")
        if not nl:
            out.append(NO_NEWLINE + "\n")
    return out
