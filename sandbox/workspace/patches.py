"""Unified diffs, pure Python: applying a parsed patch with exact context (all or
nothing), and producing diffs for reviewers and for publishing. Parsing is
``core.patchtext``'s, the same reader the validator uses.

Text is handled as ``str`` decoded with ``surrogateescape`` so bytes that are not
UTF-8 survive a round trip unchanged; such lines simply never match a patch."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from core.patchtext import FilePatch, Line, PatchRefused, header_line, join_lines, parse_patch, quoted_name, split_lines
from core.paths import PathRefused, canonical_path
from sandbox.workspace.linediff import Block, DiffCancelled, matching_blocks

__all__ = ["DiffCancelled", "FilePatch", "PatchRefused", "apply_hunks", "parse_patch", "unified_diff"]

NO_NEWLINE = "\\ No newline at end of file"


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


def unified_diff(path: str, old: str | None, new: str | None, context: int = 3, cancelled: Callable[[], bool] | None = None) -> str:
    """A git-style diff of one file (None: absent), with exact 'No newline' markers
    so that ``apply_hunks`` reproduces ``new`` from ``old``, and names quoted as git
    quotes them. ``cancelled`` is asked now and then while lines are matched: True
    ends the diff with DiffCancelled."""
    if old == new:
        return ""
    try:
        # A path outside the grammar (a newline in a name, say) could forge a header.
        if canonical_path(path) != path:
            raise PathRefused(f"path {path!r} is not canonical")
    except PathRefused as exc:
        raise PatchRefused(str(exc)) from None
    a, b = split_lines(old or ""), split_lines(new or "")
    out = [f"diff --git {quoted_name('a/' + path)} {quoted_name('b/' + path)}\n"]
    if old is None:
        out.append("new file mode 100644\n")
    if new is None:
        out.append("deleted file mode 100644\n")
    out.append(header_line("---", None if old is None else "a/" + path))
    out.append(header_line("+++", None if new is None else "b/" + path))
    for changes in _hunks(matching_blocks(a, b, cancelled), context):
        first, last = changes[0], changes[-1]
        a_from = max(0, first[0] - context)
        a_to = min(len(a), last[1] + context)
        b_from, b_to = first[2] - (first[0] - a_from), last[3] + (a_to - last[1])
        out.append(f"@@ -{_range(a_from, a_to)} +{_range(b_from, b_to)} @@\n")
        at = a_from
        for i1, i2, j1, j2 in changes:
            out.extend(_emit(" ", a[at:i1]))
            out.extend(_emit("-", a[i1:i2]))
            out.extend(_emit("+", b[j1:j2]))
            at = i2
        out.extend(_emit(" ", a[at:a_to]))
    return "".join(out)


Change = tuple[int, int, int, int]  # a[i1:i2] becomes b[j1:j2]


def _hunks(blocks: list[Block], context: int) -> list[list[Change]]:
    """The changes between the matching blocks, grouped into hunks: changes with at
    most twice ``context`` equal lines between them share one (as git and difflib group)."""
    hunks: list[list[Change]] = []
    i = j = 0
    for ai, bj, size in blocks:
        if i < ai or j < bj:
            if hunks and i - hunks[-1][-1][1] <= 2 * context:
                hunks[-1].append((i, ai, j, bj))
            else:
                hunks.append([(i, ai, j, bj)])
        i, j = ai + size, bj + size
    return hunks


def _emit(op: str, lines: Sequence[Line]) -> list[str]:
    out = []
    for text, nl in lines:
        out.append(f"{op}{text}\n")
        if not nl:
            out.append(NO_NEWLINE + "\n")
    return out
