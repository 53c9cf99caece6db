"""What ``publish`` ships, and what the reviewer is shown before it: both come from
``publication``, from one revision of the workspace, so the patch a reviewer
approved is byte for byte the patch in the outbox.

A publication is refused, with the paths named, when the workspace differs from its
source anywhere outside the contract's ``allowed_write_paths`` (skipped binary files
and symlinks included): such a change is never shipped silently. Its patch applies
with ``git apply`` to the source revision; the paths in it passed the path grammar,
so no file name can be read as a diff header."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from core.patchtext import TOO_LARGE
from core.paths import path_allowed, shown_path
from sandbox.workspace.patches import PatchRefused
from sandbox.workspace.run_workspace import PatchSet, RunWorkspace


@dataclass(frozen=True)
class ReviewLimits:
    """The most of a publish's diff a reviewer is shown (the server's
    HARNESS_REVIEW_DIFF_MAX_BYTES and _LINES): the page renders each line twice,
    unified and side by side (docs/performance.md has what that costs)."""

    max_bytes: int = 2_000_000
    max_lines: int = 100_000


class PublishRefused(Exception):
    pass


@dataclass(frozen=True)
class Publication:
    revision: str
    patch: PatchSet

    @property
    def text(self) -> str:
        """The patch as the reviewer sees it and as the outbox file ends."""
        return self._skipped() + self.patch.text

    def shown(self, limits: ReviewLimits) -> str:
        """``text`` for a reviewer: each file's diff while the limits hold, and for
        the rest a line saying it is too large to show (such a preview cannot be
        granted: core.patchtext.preview_problem)."""
        out = [self._skipped()]
        bytes_left, lines_left = limits.max_bytes, limits.max_lines
        for path, diff in zip(self.patch.files, self.patch.diffs, strict=True):
            size, lines = len(diff.encode("utf-8", "surrogateescape")), diff.count("\n")
            if size <= bytes_left and lines <= lines_left:
                out.append(diff)
                bytes_left, lines_left = bytes_left - size, lines_left - lines
                continue
            rows = diff.split("\n")
            added = sum(1 for row in rows if row.startswith("+")) - 1  # less the "+++" header
            removed = sum(1 for row in rows if row.startswith("-")) - 1
            out.append(
                f"{TOO_LARGE}{shown_path(path)}: {lines} lines, {size} bytes of diff (+{added} -{removed}); "
                f"a reviewer is shown at most {limits.max_lines} lines and {limits.max_bytes} bytes of a publish\n"
            )
        return "".join(out)

    def _skipped(self) -> str:
        return "".join(f"# not published: {s['path']} ({s['reason']})\n" for s in self.patch.skipped)


def publication(workspace: RunWorkspace, write_paths: Sequence[str], cancelled: Callable[[], bool] | None = None) -> Publication:
    """The workspace's changes at its current revision, or PublishRefused.

    The revision is verified by a full walk first (RevisionMismatch otherwise): what
    ships is read from the disk, so the disk must be what the maintained revision
    says, and a change that came around the harness's tools stops the run instead."""
    revision = workspace.verify()
    try:
        patch = workspace.diff(cancelled)
    except PatchRefused as exc:
        raise PublishRefused(f"the workspace's changes cannot be published: {exc}") from None
    changed = patch.files + [s["path"] for s in patch.skipped]
    outside = sorted(path for path in changed if not path_allowed(path, write_paths))
    if outside:
        raise PublishRefused(
            f"the workspace changes files outside allowed_write_paths {list(write_paths)}: "
            + ", ".join(shown_path(path) for path in outside)
        )
    if workspace.revision() != revision:
        # Nothing but the harness writes the workspace; if it moved, what was read is
        # not one revision, and must not be shipped as one.
        raise PublishRefused("the workspace changed while its changes were read")
    return Publication(revision, patch)
