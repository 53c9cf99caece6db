"""Which lines of two texts match, in bounded time: the common prefix and suffix,
then lines unique on both sides as anchors (the longest run of them in order, as
patience diff does), and between anchors Myers' O(ND) search while a work budget
lasts. What the budget does not cover is shown as removed and added whole: a diff
is still exact (applying it gives the new text), only less minimal, and its cost
grows with the size of the texts, not with their product.

``difflib.SequenceMatcher`` has no such bound: a file of many equal lines (blank
lines) made it quadratic and worse (a 3,000-line file against 130 KB of
alternating blank lines took minutes of CPU)."""

from __future__ import annotations

import bisect
from collections.abc import Callable, Hashable, Sequence

# Units of work (a line compared or counted) one file's diff may spend, and how
# often it asks whether to go on (a kill): past the budget the rest is replaced whole.
WORK_BUDGET = 4_000_000
CHECK_EVERY = 50_000
# Myers keeps one row per edit for the way back; more edits than this in one gap
# between anchors are not searched (the memory would grow with their square).
MAX_EDITS = 1_000

Block = tuple[int, int, int]  # (start in a, start in b, length) of equal lines


class DiffCancelled(Exception):
    """The diff was stopped from outside (the run was killed)."""


class _Work:
    def __init__(self, cancelled: Callable[[], bool] | None) -> None:
        self.left = WORK_BUDGET
        self.cancelled = cancelled
        self.until_check = CHECK_EVERY

    def spend(self, units: int) -> bool:
        """Spend ``units``; False once the budget is gone. DiffCancelled on a kill."""
        self.left -= units
        self.until_check -= units
        if self.until_check <= 0:
            self.until_check = CHECK_EVERY
            if self.cancelled is not None and self.cancelled():
                raise DiffCancelled("the diff was stopped")
        return self.left > 0


def matching_blocks(a: Sequence[Hashable], b: Sequence[Hashable], cancelled: Callable[[], bool] | None = None) -> list[Block]:
    """Equal runs of ``a`` and ``b`` in order, ending with (len(a), len(b), 0) as
    difflib's do."""
    ids: dict[Hashable, int] = {}
    ia = [ids.setdefault(line, len(ids)) for line in a]
    ib = [ids.setdefault(line, len(ids)) for line in b]
    work = _Work(cancelled)
    work.spend(len(ia) + len(ib))
    pairs: list[tuple[int, int]] = []
    stack = [(0, len(ia), 0, len(ib))]
    while stack:
        alo, ahi, blo, bhi = stack.pop()
        while alo < ahi and blo < bhi and ia[alo] == ib[blo]:
            pairs.append((alo, blo))
            alo, blo = alo + 1, blo + 1
        while alo < ahi and blo < bhi and ia[ahi - 1] == ib[bhi - 1]:
            ahi, bhi = ahi - 1, bhi - 1
            pairs.append((ahi, bhi))
        if alo == ahi or blo == bhi or not work.spend(ahi - alo + bhi - blo):
            continue
        anchors = _unique_anchors(ia, ib, alo, ahi, blo, bhi)
        if anchors:
            pairs.extend(anchors)
            bounds = [(alo - 1, blo - 1), *anchors, (ahi, bhi)]
            stack.extend((i + 1, i2, j + 1, j2) for (i, j), (i2, j2) in zip(bounds, bounds[1:], strict=False) if i + 1 < i2 and j + 1 < j2)
        else:
            pairs.extend(_myers(ia, ib, alo, ahi, blo, bhi, work))
    pairs.sort()
    return _blocks(pairs, len(ia), len(ib))


def _unique_anchors(a: list[int], b: list[int], alo: int, ahi: int, blo: int, bhi: int) -> list[tuple[int, int]]:
    """Lines that occur once in a[alo:ahi] and once in b[blo:bhi], the longest
    sequence of them in the same order on both sides."""
    seen_a: dict[int, int] = {}
    for i in range(alo, ahi):
        seen_a[a[i]] = -1 if a[i] in seen_a else i
    seen_b: dict[int, int] = {}
    for j in range(blo, bhi):
        line = b[j]
        if seen_a.get(line, -1) >= 0:
            seen_b[line] = -1 if line in seen_b else j
    candidates = sorted((seen_a[line], j) for line, j in seen_b.items() if j >= 0)
    return _longest_increasing(candidates)


def _longest_increasing(pairs: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The longest subsequence of ``pairs`` (sorted by the first) increasing in the second."""
    tails: list[int] = []  # tails[k]: the smallest second of an increasing run of k+1
    tail_index: list[int] = []
    back = [-1] * len(pairs)
    for index, (_, j) in enumerate(pairs):
        k = bisect.bisect_left(tails, j)
        if k == len(tails):
            tails.append(j)
            tail_index.append(index)
        else:
            tails[k] = j
            tail_index[k] = index
        back[index] = tail_index[k - 1] if k > 0 else -1
    out = []
    index = tail_index[-1] if tail_index else -1
    while index >= 0:
        out.append(pairs[index])
        index = back[index]
    return out[::-1]


def _myers(a: list[int], b: list[int], alo: int, ahi: int, blo: int, bhi: int, work: _Work) -> list[tuple[int, int]]:
    """The equal pairs of a shortest edit script of a[alo:ahi] against b[blo:bhi],
    or none (all replaced) if it needs more edits or work than there is."""
    n, m = ahi - alo, bhi - blo
    limit = min(n + m, MAX_EDITS)
    offset = limit + 1
    v = [0] * (2 * limit + 3)
    trace: list[list[int]] = []
    for d in range(limit + 1):
        trace.append(v[offset - d - 1 : offset + d + 2])
        for k in range(-d, d + 1, 2):
            x = v[offset + k + 1] if k == -d or k != d and v[offset + k - 1] < v[offset + k + 1] else v[offset + k - 1] + 1
            y, start = x - k, x
            while x < n and y < m and a[alo + x] == b[blo + y]:
                x, y = x + 1, y + 1
            v[offset + k] = x
            if x >= n and y >= m:
                return _myers_path(trace, n, m, alo, blo)
            if not work.spend(x - start + 1):
                return []
    return []


def _myers_path(trace: list[list[int]], x: int, y: int, alo: int, blo: int) -> list[tuple[int, int]]:
    pairs = []
    for d in range(len(trace) - 1, -1, -1):
        row = trace[d]  # v before step d, for k in [-d-1, d+1]

        def at(k: int, row: list[int] = row, d: int = d) -> int:
            return row[k + d + 1]

        k = x - y
        prev_k = k + 1 if k == -d or (k != d and at(k - 1) < at(k + 1)) else k - 1
        prev_x = at(prev_k) if d > 0 else 0
        prev_y = prev_x - prev_k if d > 0 else 0
        while x > prev_x and y > prev_y:
            x, y = x - 1, y - 1
            pairs.append((alo + x, blo + y))
        x, y = prev_x, prev_y
    return pairs


def _blocks(pairs: list[tuple[int, int]], n: int, m: int) -> list[Block]:
    blocks: list[Block] = []
    for i, j in pairs:
        if blocks and blocks[-1][0] + blocks[-1][2] == i and blocks[-1][1] + blocks[-1][2] == j:
            blocks[-1] = (blocks[-1][0], blocks[-1][1], blocks[-1][2] + 1)
        else:
            blocks.append((i, j, 1))
    blocks.append((n, m, 0))
    return blocks
