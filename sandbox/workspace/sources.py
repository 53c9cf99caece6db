"""What a workspace may be made from, checked before anything is read: a path under
the allowed source roots (``HARNESS_WORKSPACE_SOURCES``) or an allowed remote, whose
file names obey the path grammar. Also the local git the preparation runs, in the
same isolated environment as remote git."""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from pathlib import Path

from core.contract import WorkspaceSource
from core.errors import FieldProblem, InputError
from core.paths import refused_character, shown_path
from sandbox.vcs import remote
from sandbox.vcs.allowlist import UnsafeURL, allowlist, place_of
from sandbox.vcs.remote import RemoteAccess, RemoteError

SERVER_SOURCES = "the allowed workspace sources ({roots}; see HARNESS_WORKSPACE_SOURCES)"


class WorkspaceSourceError(InputError):
    def __init__(self, message: str, field: str = "workspace.path") -> None:
        super().__init__("workspace", [FieldProblem(field, message)])


def check_source(source: WorkspaceSource, base_dir: Path, allowed_roots: Sequence[Path], allowed_remotes: Sequence[str] = ()) -> None:
    """WorkspaceSourceError (RemoteError for a remote) unless the source is allowed and
    exists; reads only, so the process creating a run (the web server, unprivileged)
    can refuse a bad source at once while the worker that drives the run prepares the
    workspace. A remote is checked against the allowed list, not contacted."""
    if source.url is not None:
        remote.check_remote_url(source.url, allowed_remotes)
        remote.check_ref(source.ref)
        return
    assert source.path is not None  # one of path and url, by WorkspaceSource
    location = resolve_source(source.path, base_dir, allowed_roots)
    exists = location.is_file() if source.kind == "archive" else location.is_dir()
    if not exists:
        raise WorkspaceSourceError(f"{source.path} is not {'a file' if source.kind == 'archive' else 'a directory'}")


def check_narrowed(source: WorkspaceSource, base_dir: Path, sources: Sequence[str], remotes: Sequence[str], project: str) -> None:
    """The project's own lists narrow the server's (checked by ``check_source`` too, so
    an entry outside the server's lists widens nothing): a path under one of
    ``sources`` (relative to ``base_dir`` or absolute), a remote under one of ``remotes``
    (entries as the server's). An empty list narrows nothing."""
    if source.url is not None:
        if not remotes:
            return
        try:
            entries = allowlist(remotes)
            place = place_of(source.url)
        except UnsafeURL as exc:
            raise RemoteError("refused", str(exc)) from None
        if not any(entry.admits(place) for entry in entries):
            raise RemoteError("refused", f"{source.url} is not one of project {project!r}'s git remotes ({', '.join(remotes)})")
        return
    if sources and source.path is not None:
        resolve_source(
            source.path,
            base_dir,
            [Path(s) if Path(s).is_absolute() else base_dir / s for s in sources],
            f"project {project!r}'s workspace sources ({{roots}})",
        )


def resolve_source(path: str, base_dir: Path, allowed_roots: Sequence[Path], allowed: str = SERVER_SOURCES) -> Path:
    candidate = Path(path)
    if not candidate.is_absolute():
        candidate = base_dir / candidate
    candidate = candidate.resolve()
    roots = [Path(r).resolve() for r in allowed_roots]
    if not any(candidate.is_relative_to(r) for r in roots):
        listed = ", ".join(str(r) for r in roots)
        raise WorkspaceSourceError(f"{path} is outside {allowed.format(roots=listed)}")
    return candidate


def check_name(path: str) -> None:
    """A file name in a source obeys the path grammar, or the source is refused."""
    why = refused_character(path)
    if why is not None:
        raise WorkspaceSourceError(f"the source has a file {shown_path(path)} that {why}; such names are refused")


def git(args: list[str], cwd: Path | None = None) -> str:
    return git_output(args, cwd).decode(errors="replace").strip()


def git_output(args: list[str], cwd: Path | None = None) -> bytes:
    # Bytes (a blob is not text), in the same isolated environment as remote git.
    env = remote.git_environment(RemoteAccess(), "file")
    done = subprocess.run(["git", *args], cwd=cwd, env=env, capture_output=True, timeout=300)
    if done.returncode != 0:
        raise WorkspaceSourceError(f"git {args[0]} failed: {done.stderr.decode(errors='replace').strip()[:500]}")
    return done.stdout
