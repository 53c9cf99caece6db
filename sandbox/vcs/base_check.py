"""Whether the remote's base branch moved since a run cloned it: how many commits it
gained, and whether the run's change still applies to its new head. Asked when a
reviewer opens a push's request and again just before the push (the policy's
``publish_checks.moved_base`` says whether a move makes the grant stale).

The web server has no workspace, so this works from the remote alone, in a
throwaway bare repository: the branch is fetched, its commits since the run's base
counted, and the diff as the reviewer is shown it applied with ``git apply --check``
to the new head. The shown diff has secrets masked: a masked line that the change
removes, or keeps as context, no longer matches the branch, so such a change is
reported as not applying (the careful answer)."""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from sandbox.vcs.remote import GitRun, RemoteAccess, RemoteError, check_remote_url, git


@dataclass(frozen=True)
class BaseMove:
    branch: str
    head: str
    # None: the branch no longer holds the run's base (it was rewritten).
    commits: int | None
    applies: bool

    def words(self) -> str:
        if self.commits is None:
            moved = f"the base branch {self.branch} was rewritten since this run started (it no longer holds the run's base commit)"
        else:
            moved = f"the base branch {self.branch} moved {self.commits} commit{'' if self.commits == 1 else 's'} since this run started"
        applies = "the change still applies cleanly to its head" if self.applies else "the change no longer applies cleanly to its head"
        return f"{moved} (now at {self.head[:12]}); {applies}"


def check_base(url: str, base: str, branch: str | None, diff: str, access: RemoteAccess) -> BaseMove | None:
    """None while ``branch`` (None: the remote's default branch) is still at ``base``;
    raises RemoteError when the remote cannot be asked."""
    check_remote_url(url, access.allowed)
    scheme = urlsplit(url).scheme
    branch, head = _head(url, branch, access, scheme)
    if head == base:
        return None
    with tempfile.TemporaryDirectory(prefix="harness-base-") as tmp:
        repo = Path(tmp) / "repo.git"
        _ok(git(["init", "--quiet", "--bare", str(repo)], access, "file"), "init")
        fetched = git(
            ["--git-dir", str(repo), "fetch", "--quiet", "--no-tags", "--", url, f"+refs/heads/{branch}:refs/heads/moved"], access, scheme
        )
        _ok(fetched, "fetch")
        counted = git(["--git-dir", str(repo), "rev-list", "--count", f"{base}..refs/heads/moved"], access, "file")
        commits = int(counted.stdout.strip()) if counted.returncode == 0 else None
        return BaseMove(branch, head, commits, _applies(repo, diff, access))


def _head(url: str, branch: str | None, access: RemoteAccess, scheme: str) -> tuple[str, str]:
    wanted = f"refs/heads/{branch}" if branch else "HEAD"
    listed = git(["ls-remote", "--symref", "--", url, wanted], access, scheme)
    _ok(listed, "ls-remote")
    name, head = branch, None
    for line in listed.stdout.splitlines():
        first, _, ref = line.partition("\t")
        if first.startswith("ref: refs/heads/") and ref == "HEAD":
            name = first.removeprefix("ref: refs/heads/")
        elif ref == wanted:
            head = first
    if head is None or name is None:
        raise RemoteError("unknown_ref", f"{url} has no branch {branch or '(default)'}")
    return name, head


def _applies(repo: Path, diff: str, access: RemoteAccess) -> bool:
    start = diff.find("diff --git ")
    if start < 0:
        return True  # no file changes: nothing to conflict
    with tempfile.TemporaryDirectory(prefix="harness-apply-") as tmp:
        index = {"GIT_INDEX_FILE": str(Path(tmp) / "index")}
        patch = Path(tmp) / "change.patch"
        patch.write_text(diff[start:], encoding="utf-8", errors="surrogateescape")
        _ok(git(["--git-dir", str(repo), "read-tree", "refs/heads/moved"], access, "file", extra_env=index), "read-tree")
        checked = git(["--git-dir", str(repo), "apply", "--cached", "--check", str(patch)], access, "file", extra_env=index)
        return checked.returncode == 0


def _ok(done: GitRun, what: str) -> None:
    if done.returncode != 0:
        said = done.stderr.strip().splitlines() or ["timed out"]
        raise RemoteError("failed" if done.returncode is not None else "unreachable", f"git {what}: {said[-1][:300]}")
