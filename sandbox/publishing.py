"""What ``publish`` ships, and what the reviewer is shown before it: both come from
``publication``, from one revision of the workspace, so the patch a reviewer
approved is byte for byte the patch in the outbox.

A publication is refused, with the paths named, when the workspace differs from its
source anywhere outside the contract's ``allowed_write_paths`` (skipped binary files
and symlinks included): such a change is never shipped silently. Its patch applies
with ``git apply`` to the source revision; the paths in it passed the path grammar,
so no file name can be read as a diff header."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from runs.core.paths import path_allowed, shown_path
from sandbox.patches import PatchRefused
from sandbox.workspace import PatchSet, RunWorkspace


class PublishRefused(Exception):
    pass


@dataclass(frozen=True)
class Publication:
    revision: str
    patch: PatchSet

    @property
    def text(self) -> str:
        """The patch as the reviewer sees it and as the outbox file ends."""
        skipped = "".join(f"# not published: {s['path']} ({s['reason']})\n" for s in self.patch.skipped)
        return skipped + self.patch.text


def publication(workspace: RunWorkspace, write_paths: Sequence[str]) -> Publication:
    """The workspace's changes at its current revision, or PublishRefused.

    The revision is verified by a full walk first (RevisionMismatch otherwise): what
    ships is read from the disk, so the disk must be what the maintained revision
    says, and a change that came around the harness's tools stops the run instead."""
    revision = workspace.verify()
    try:
        patch = workspace.diff()
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
