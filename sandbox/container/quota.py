"""Disk limits around checks, none of which walks the tree while a check runs.

What a check writes is bounded by the kernel, not measured by the harness: the
workspace is mounted read-only into the container (and the container proves it before
every execution), the root filesystem is read-only, and the only writable place is
the scratch tmpfs of ``sandbox.scratch_mb``, where the kernel answers ENOSPC. A check
that must write its tree (``on_copy``) writes a copy of it in that same scratch, so
its copy and all it builds there are bounded the same way. Nothing a check does can
make the workspace grow, so there is no entry limit and no measurement during it.

The workspace grows only through the harness's own file tools; its size is kept by
the revision index along what each write adds or frees (``RevisionIndex.usage``,
set again by every full walk), so reading it costs nothing. A check is refused before
it starts when the workspace holds more than the policy's ``workspace_max_mb``, or
when the worker's disk has less free space than ``HARNESS_DISK_RESERVE_MB``. What
does land on the worker's disk during a check is its output, spooled for the
artifact store; the free space there is read (one ``statvfs``) every
``WATCH_SECONDS`` and the check stopped when it falls below the reserve. That output
is bounded too: one check stores at most ``output_max_bytes`` of it
(``sandbox.container.output`` says where it was cut), and a run's artifacts together
at most ``run_artifacts_max_bytes``; a run that has used them up runs no more checks."""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

MB = 1 << 20
# How often the free space under a running check's spooled output is read: a check
# printing at disk speed can overshoot the reserve by what it prints in this time.
WATCH_SECONDS = 0.5


@dataclass(frozen=True)
class QuotaProblem:
    reason: str
    host: bool  # the worker's disk is short of its reserve: not this run's doing


@dataclass(frozen=True)
class DiskQuota:
    workspace_max_bytes: int = 1024 * MB
    reserve_bytes: int = 1024 * MB
    output_max_bytes: int = 8 * MB
    run_artifacts_max_bytes: int = 512 * MB

    def problem(self, used_bytes: int, disk: Path) -> QuotaProblem | None:
        """Why no check may start in a workspace holding ``used_bytes`` on ``disk``."""
        if used_bytes > self.workspace_max_bytes:
            return QuotaProblem(
                f"the workspace holds {used_bytes // MB} MB, over its quota of {self.workspace_max_bytes // MB} MB", host=False
            )
        return self.host_problem(disk)

    def host_problem(self, disk: Path) -> QuotaProblem | None:
        """Why nothing more may be written to ``disk`` (the worker's), or None."""
        try:
            free = shutil.disk_usage(disk).free
        except OSError as exc:
            return QuotaProblem(f"the worker's disk cannot be measured ({exc})", host=True)
        if free < self.reserve_bytes:
            return QuotaProblem(
                f"the worker's disk has {free // MB} MB free, less than the {self.reserve_bytes // MB} MB it must keep", host=True
            )
        return None

    def output_limit(self, run_stored_bytes: int) -> int | QuotaProblem:
        """How much of a check's output may be stored, for a run whose artifacts
        hold ``run_stored_bytes``; the problem when that is nothing."""
        room = self.run_artifacts_max_bytes - run_stored_bytes
        if room <= 0:
            return QuotaProblem(
                f"this run's artifacts hold {run_stored_bytes // MB} MB, its quota is {self.run_artifacts_max_bytes // MB} MB"
                " (HARNESS_RUN_ARTIFACTS_MAX_MB): it can store no more check output",
                host=False,
            )
        return min(self.output_max_bytes, room)
