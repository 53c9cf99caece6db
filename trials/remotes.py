"""The evaluation set's git remotes: a bare repository made for one suite task from a
directory of examples/, under the server's var directory, that its runs clone and
publish to. ``drop_push_answer`` makes it accept the first push to a run's branch and
then drop the connection before answering (its ``reference-transaction`` hook ends
the receiving process once the branch is written), as a server whose connection is lost
after the push arrived: the push's outcome is unknown to the run, which must find out
(its lookup sees the branch at its commit) and never push again.

The remote is a ``file://`` URL: the server's allowed remotes
(``HARNESS_GIT_ALLOWED_REMOTES``) must admit it, and the workers must see the var
directory at the same path (one host, or a shared volume).

A remote holds what its trial's runs published, so it is kept as long as their
artifacts: ``delete_expired_remotes`` (the beat, ``HARNESS_ARTIFACT_RETENTION_DAYS``)
deletes those of trials that ended before the cut-off, and any no trial names that were
made before it (a suite whose start failed after making them)."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import uuid
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from django.conf import settings

from sandbox.public import UnsafeURL, admitted, allowlist

# Runs in the receiving process (git receive-pack) once the refs are written: the
# first update of a run's branch ends that process, so the pushing side never hears
# that its push was accepted.
DROP_HOOK = """#!/bin/sh
[ "$1" = committed ] || exit 0
grep -q ' refs/heads/harness/' || exit 0
[ -e "$GIT_DIR/answer-dropped" ] && exit 0
: > "$GIT_DIR/answer-dropped"
kill -9 "$PPID"
"""
AUTHOR = ("-c", "user.name=Harness evaluation set", "-c", "user.email=evalset@harness.invalid")


class RemoteNotAllowed(Exception):
    """The server may not use the evaluation set's remote (its allowed remotes do not admit it)."""


def remotes_dir() -> Path:
    return Path(settings.VAR_DIR) / "evalset-remotes"


def _git(*args: str, cwd: Path | None = None) -> None:
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": "/nonexistent",
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": "/dev/null",
        "LC_ALL": "C",
    }
    subprocess.run(["git", *AUTHOR, *args], cwd=cwd, env=env, check=True, capture_output=True, timeout=60)


def make_remote(name: str, spec: dict[str, Any]) -> str:
    """A new bare repository holding ``spec["from"]`` (a directory under the server's
    base directory) on ``main``; its ``file://`` URL. RemoteNotAllowed when the server's
    allowed remotes do not admit it (nothing is made)."""
    bare = remotes_dir() / f"{name}-{uuid.uuid4().hex[:12]}.git"
    url = bare.as_uri()
    try:
        allowed = admitted(url, allowlist(settings.GIT_ALLOWED_REMOTES))
    except UnsafeURL:
        allowed = False
    if not allowed:
        listed = ", ".join(settings.GIT_ALLOWED_REMOTES) or "none are configured"
        raise RemoteNotAllowed(
            f"its git remote {url} is not allowed: add {remotes_dir().as_uri()}/ to HARNESS_GIT_ALLOWED_REMOTES (now: {listed})"
        )
    source = Path(settings.BASE_DIR) / str(spec["from"])
    bare.parent.mkdir(parents=True, exist_ok=True)
    _git("init", "--quiet", "--bare", "--initial-branch=main", str(bare))
    with tempfile.TemporaryDirectory(prefix="evalset-") as scratch:
        work = Path(scratch) / "work"
        shutil.copytree(source, work, ignore=shutil.ignore_patterns("__pycache__", ".pytest_cache", "*.pyc"))
        _git("init", "--quiet", "--initial-branch=main", cwd=work)
        _git("add", "-A", cwd=work)
        _git("commit", "--quiet", "-m", f"The evaluation set's {name}", cwd=work)
        _git("push", "--quiet", str(bare), "main", cwd=work)
    if spec.get("drop_push_answer"):
        hook = bare / "hooks" / "reference-transaction"
        hook.write_text(DROP_HOOK)
        hook.chmod(0o755)
    return url


def answer_dropped(url: str) -> bool:
    """Whether the remote at ``url`` has dropped its one answer."""
    return (Path(url.removeprefix("file://")) / "answer-dropped").exists()


def delete_expired_remotes(days: int, now: datetime) -> list[str]:
    """Delete the remotes of trials that ended more than ``days`` before ``now``, and
    those no trial names made before then; the names deleted. ``days`` 0 deletes nothing."""
    from trials.models import Trial

    root = remotes_dir()
    if days <= 0 or not root.is_dir():
        return []
    cutoff = now - timedelta(days=days)
    named: dict[str, bool] = {}
    for task, ended_at in Trial.objects.exclude(suite="").values_list("task", "ended_at"):
        url = str(((task.get("contract") or {}).get("workspace") or {}).get("url", ""))
        if url.startswith(root.as_uri() + "/"):
            name = url.removeprefix(root.as_uri() + "/")
            named[name] = named.get(name, True) and ended_at is not None and ended_at < cutoff
    deleted = []
    for bare in sorted(root.glob("*.git")):
        expired = named.get(bare.name)
        if expired is None:
            expired = datetime.fromtimestamp(bare.stat().st_mtime, tz=now.tzinfo) < cutoff
        if expired:
            shutil.rmtree(bare, ignore_errors=True)
            deleted.append(bare.name)
    return deleted
