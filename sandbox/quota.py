"""Disk limits for what checks write. The workspace is a directory on the worker's
disk mounted into the container, so nothing in the container bounds how much a check
can write there; the harness measures it before and during every check instead.

A check is refused before it starts, or its processes are killed while it runs, when
the workspace holds more than the policy's ``workspace_max_mb`` or the worker's disk
has less free space than ``HARNESS_DISK_RESERVE_MB``. Measurement counts allocated
blocks (as ``du`` does: a sparse file costs what it uses), everything included
(``.git`` too, which the file tools never show), never following symlinks. A tree
that cannot be measured counts as over the limit: a check must not hide its writes
by nesting them too deep."""

from __future__ import annotations

import os
import shutil
import stat
from dataclasses import dataclass
from pathlib import Path

from sandbox import fileops

MB = 1 << 20
# How often a running check's writes are measured: a check writing at disk speed can
# overshoot the quota by what it writes in this time.
WATCH_SECONDS = 0.5
# More entries than this count as over the quota: it bounds the inodes a check can use
# and the time one measurement takes (about 0.5 s for 200,000 entries here).
MAX_ENTRIES = 200_000


@dataclass(frozen=True)
class QuotaProblem:
    reason: str
    host: bool  # the worker's disk is short of its reserve: not this run's doing


@dataclass(frozen=True)
class DiskQuota:
    workspace_max_bytes: int = 1024 * MB
    reserve_bytes: int = 1024 * MB

    def problem(self, workspace_dir: Path) -> QuotaProblem | None:
        """Why checks may not write to this workspace now, or None."""
        try:
            used = usage_bytes(workspace_dir)
            free = shutil.disk_usage(workspace_dir).free
        except (OSError, RecursionError, fileops.FileRefused) as exc:
            return QuotaProblem(f"the workspace cannot be measured ({exc}), so it counts as over its quota", host=False)
        if used > self.workspace_max_bytes:
            return QuotaProblem(f"the workspace holds {used // MB} MB, over its quota of {self.workspace_max_bytes // MB} MB", host=False)
        if free < self.reserve_bytes:
            return QuotaProblem(
                f"the worker's disk has {free // MB} MB free, less than the {self.reserve_bytes // MB} MB it must keep", host=True
            )
        return None


def usage_bytes(root: Path) -> int:
    # Not fileops.walk: that leaves .git out and skips what it cannot open, where a
    # measurement must count everything and fail closed.
    counted = [0]
    with fileops.opened_root(root) as fd:
        return _usage(fd, "", 0, counted)


def _usage(dir_fd: int, prefix: str, depth: int, counted: list[int]) -> int:
    total = 0
    for name, st in fileops.stat_entries(dir_fd, prefix, depth):
        counted[0] += 1
        if counted[0] > MAX_ENTRIES:
            raise fileops.FileRefused(f"more than {MAX_ENTRIES} files and directories")
        total += st.st_blocks * 512
        if stat.S_ISDIR(st.st_mode):
            try:
                child = os.open(name, fileops.DIR_FLAGS, dir_fd=dir_fd)
            except (FileNotFoundError, NotADirectoryError):
                continue  # a check's temporary directory, gone while we looked
            try:
                total += _usage(child, f"{prefix}{name}/", depth + 1, counted)
            finally:
                os.close(child)
    return total
