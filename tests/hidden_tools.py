"""A command run as on a machine without some tools: each named file is hidden under
an empty one in a private mount namespace, so the tools stay where they are for every
other process (needs root, as scripts/setup.sh does)."""

from __future__ import annotations

import shlex
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

HIDE = 'for f in "$@"; do [ -e "$f" ] && mount --bind "$HIDDEN_EMPTY" "$f"; done; exec env -u HIDDEN_EMPTY '


def run_without(
    hidden: Sequence[str], argv: Sequence[str], *, scratch: Path, env: Mapping[str, str], cwd: Path, timeout: float
) -> subprocess.CompletedProcess[str]:
    empty = scratch / "hidden-empty"
    empty.write_text("")
    script = HIDE + shlex.join(argv)
    return subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "sh", "-c", script, "hide", *hidden],
        cwd=cwd,
        env={**env, "HIDDEN_EMPTY": str(empty)},
        capture_output=True,
        text=True,
        timeout=timeout,
    )
