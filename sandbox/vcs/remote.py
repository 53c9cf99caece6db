"""Git remotes: cloning a run's workspace from one, and publishing by pushing a branch.

Only the worker's own git processes ever see a credential: the HTTPS token travels
as an ``http.extraHeader`` set through git's environment configuration (never in
argv, the URL, the workspace or the sandbox), the SSH key through
``GIT_SSH_COMMAND``. Every git process runs without the user's or the system's
configuration, hooks or prompts, and may speak only the remote's own protocol.

A push's outcome is decided by the remote itself: ``ls-remote`` of the operation's
branch is the authoritative lookup for a push whose answer was lost."""

from __future__ import annotations

import base64
import os
import re
import shlex
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal
from urllib.parse import urlsplit

from core.effects import Identity, PushEffect, shown_line
from core.errors import FieldProblem, InputError
from sandbox.vcs.allowlist import UnsafeURL, allowlist, place_of

HEX_REF = re.compile(r"^[0-9a-f]{7,40}$")
Cause = Literal["refused", "malformed", "unknown_ref", "auth", "unreachable", "failed"]
PushOutcome = Literal["applied", "rejected", "unknown", "not_applied"]

# What git prints for each cause (git 2.x wording; the C locale is forced).
# The status is matched with git's words around it: a bare "403" also matches a port
# or a path in the URL git quotes (a loopback server on port 40312 made a 503 "auth").
_AUTH = (
    "authentication failed",
    "could not read username",
    "could not read password",
    "permission denied (publickey",
    "returned error: 403",
)
_UNKNOWN_REF = ("remote branch", "couldn't find remote ref", "not our ref", "no such ref", "invalid refspec")
_UNREACHABLE = ("could not resolve host", "failed to connect", "connection refused", "does not appear to be a git repository")
# A passing network failure, worth another clone attempt: refused, reset or timed
# out connections, a connection dropped mid-transfer, a server's 5xx answer.
_PASSING = (
    "failed to connect",
    "connection refused",
    "connection reset",
    "connection timed out",
    "operation timed out",
    "early eof",
    "empty reply from server",
    "recv failure",
    "remote end hung up unexpectedly",
    "returned error: 5",
    "http 5",
)
# Said before any byte of the push reached the server: the push did not happen.
_NOT_SENT = ("could not resolve host", "failed to connect", "connection refused", "authentication failed", "could not read username")


class RemoteError(InputError):
    """A remote workspace source that cannot be used; ``cause`` says why."""

    def __init__(self, cause: Cause, message: str, field: str = "workspace.url") -> None:
        super().__init__("workspace", [FieldProblem(field, message)])
        self.cause = cause
        self.message = message


@dataclass(frozen=True)
class RemoteAccess:
    """The server's side of remote access: which remotes, which credentials, as whom."""

    allowed: tuple[str, ...] = ()
    # Out of repr: a logged RemoteAccess must not carry the credential.
    token: str | None = field(default=None, repr=False)
    token_user: str = "x-access-token"  # noqa: S105 - the user name forges accept with a token, not a secret
    ssh_key_file: Path | None = None
    ssh_known_hosts: Path | None = None
    author_name: str = "Harness"
    author_email: str = "harness@localhost"
    timeout_seconds: float = 120.0
    # A clone that fails for a passing network reason is tried again, waiting
    # backoff, 2 x backoff, ... (at most backoff_max) in between.
    clone_attempts: int = 1
    clone_backoff_seconds: float = 1.0
    clone_backoff_max_seconds: float = 30.0

    @classmethod
    def from_settings(cls, s: object) -> RemoteAccess:
        token_file = getattr(s, "GIT_TOKEN_FILE", None)
        token = Path(token_file).read_text().strip() if token_file else getattr(s, "GIT_TOKEN", "") or None
        name, email = getattr(s, "GIT_AUTHOR", ("Harness", "harness@localhost"))
        key = getattr(s, "GIT_SSH_KEY_FILE", None)
        hosts = getattr(s, "GIT_SSH_KNOWN_HOSTS", None)
        return cls(
            allowed=tuple(getattr(s, "GIT_ALLOWED_REMOTES", ())),
            token=token,
            token_user=str(getattr(s, "GIT_TOKEN_USER", "x-access-token")),
            ssh_key_file=Path(key) if key else None,
            ssh_known_hosts=Path(hosts) if hosts else None,
            author_name=str(name),
            author_email=str(email),
            timeout_seconds=float(getattr(s, "GIT_TIMEOUT_SECONDS", 120.0)),
            clone_attempts=int(getattr(s, "GIT_CLONE_ATTEMPTS", 1)),
            clone_backoff_seconds=float(getattr(s, "GIT_CLONE_BACKOFF_SECONDS", 1.0)),
            clone_backoff_max_seconds=float(getattr(s, "GIT_CLONE_BACKOFF_MAX_SECONDS", 30.0)),
        )


# -- validation ------------------------------------------------------------------


def check_remote_url(url: str, allowed: Sequence[str]) -> str:
    """The URL if it is plain (``sandbox.vcs.allowlist``) and under one of the server's
    allowed remotes."""
    try:
        entries = allowlist(allowed)
    except UnsafeURL as exc:
        # The settings refuse a bad entry at start; one handed in any other way too.
        raise RemoteError("refused", str(exc)) from None
    try:
        place = place_of(url)
    except UnsafeURL as exc:
        raise RemoteError("malformed", str(exc)) from None
    if not any(entry.admits(place) for entry in entries):
        listed = ", ".join(allowed) if allowed else "none are configured"
        raise RemoteError("refused", f"{url} is not an allowed remote (HARNESS_GIT_ALLOWED_REMOTES: {listed})")
    return url


def check_ref(ref: str | None) -> str | None:
    if ref is not None and (ref.startswith("-") or ".." in ref or any(c.isspace() or ord(c) < 32 or c in "~^:?*[\\" for c in ref)):
        raise RemoteError("malformed", f"{ref!r} is not a valid git ref", field="workspace.ref")
    return ref


# -- git processes ---------------------------------------------------------------


@dataclass
class GitRun:
    returncode: int | None  # None: killed at the timeout
    stdout: str
    stderr: str


def git_environment(access: RemoteAccess, scheme: str, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": "/nonexistent",
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": "/dev/null",
        "GIT_TERMINAL_PROMPT": "0",
        "GIT_ASKPASS": "/bin/false",
        "SSH_ASKPASS": "/bin/false",
        # Only the remote's own transport: no ext::, no redirect to another scheme.
        "GIT_ALLOW_PROTOCOL": scheme,
        "LC_ALL": "C",
    }
    config = [("core.hooksPath", "/dev/null"), ("advice.detachedHead", "false"), ("safe.directory", "*")]
    # A redirect could carry the token's header to another host.
    config.append(("http.followRedirects", "false"))
    if access.token and scheme in ("https", "http"):
        basic = base64.b64encode(f"{access.token_user}:{access.token}".encode()).decode()
        config.append(("http.extraHeader", f"Authorization: Basic {basic}"))
    if scheme == "ssh":
        ssh = ["ssh", "-o", "BatchMode=yes", "-o", "IdentitiesOnly=yes"]
        if access.ssh_key_file is not None:
            ssh += ["-i", str(access.ssh_key_file)]
        if access.ssh_known_hosts is not None:
            ssh += ["-o", "StrictHostKeyChecking=yes", "-o", f"UserKnownHostsFile={access.ssh_known_hosts}"]
        env["GIT_SSH_COMMAND"] = shlex.join(ssh)
    env["GIT_CONFIG_COUNT"] = str(len(config))
    for i, (key, value) in enumerate(config):
        env[f"GIT_CONFIG_KEY_{i}"] = key
        env[f"GIT_CONFIG_VALUE_{i}"] = value
    return {**env, **(extra or {})}


def git(
    args: list[str],
    access: RemoteAccess,
    scheme: str,
    cwd: Path | None = None,
    extra_env: Mapping[str, str] | None = None,
    stdin: str | None = None,
) -> GitRun:
    try:
        done = subprocess.run(
            ["git", *args],
            cwd=cwd,
            input=stdin,
            env=git_environment(access, scheme, extra_env),
            capture_output=True,
            text=True,
            timeout=access.timeout_seconds,
        )
    except subprocess.TimeoutExpired as exc:
        return GitRun(None, _text(exc.stdout), _text(exc.stderr))
    return GitRun(done.returncode, done.stdout, done.stderr)


def _text(value: bytes | str | None) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else value or ""


def _cause(stderr: str) -> Cause:
    low = stderr.lower()
    if any(s in low for s in _AUTH):
        return "auth"
    if any(s in low for s in _UNKNOWN_REF):
        return "unknown_ref"
    if any(s in low for s in _UNREACHABLE):
        return "unreachable"
    return "failed"


def _local(
    args: list[str], git_dir: Path, access: RemoteAccess, extra_env: Mapping[str, str] | None = None, stdin: str | None = None
) -> str:
    """A git command on the worker's own repository; failing here is a bug, not input."""
    done = git(["--git-dir", str(git_dir), *args], access, "file", extra_env=extra_env, stdin=stdin)
    if done.returncode != 0:
        raise RuntimeError(f"git {args[0]} failed: {done.stderr.strip()[:500]}")
    return done.stdout.strip()


# -- clone -----------------------------------------------------------------------


def clone(url: str, ref: str | None, dest: Path, access: RemoteAccess, sleep: Callable[[float], None] = time.sleep) -> str:
    """Check out ``url`` at ``ref`` (default: its HEAD) into ``dest`` and return the
    commit. Shallow where the ref allows it; a commit id that the server will not
    serve shallowly is fetched with history. A passing network failure is retried
    with bounded backoff; a refused credential or an unknown ref is not. Raises
    ``RemoteError`` naming the cause."""
    check_remote_url(url, access.allowed)
    check_ref(ref)
    what = f"ref {ref!r}" if ref else "its default branch"
    attempt = 1
    while True:
        done, wanted = _clone_once(url, ref, dest, access)
        if done.returncode == 0 or attempt >= access.clone_attempts or not passing_failure(done):
            break
        shutil.rmtree(dest, ignore_errors=True)
        sleep(min(access.clone_backoff_seconds * 2 ** (attempt - 1), access.clone_backoff_max_seconds))
        attempt += 1
    if done.returncode != 0:
        cause = _cause(done.stderr) if done.returncode is not None else "unreachable"
        detail = _last_line(done.stderr) or "timed out"
        if cause == "unknown_ref":
            raise RemoteError(cause, f"{url} has no branch or tag {ref!r} ({detail})", field="workspace.ref")
        if cause == "auth":
            raise RemoteError(cause, f"{url}: authentication failed with the server's credentials ({detail})")
        tries = f" after {attempt} attempts" if attempt > 1 else ""
        raise RemoteError(cause, f"could not clone {url}{tries}: {detail}")
    found = git(["rev-parse", "--verify", "--quiet", f"{wanted}^{{commit}}"], access, "file", cwd=dest)
    if found.returncode != 0:
        raise RemoteError("unknown_ref", f"{url} has no commit {what}", field="workspace.ref")
    commit = found.stdout.strip()
    checkout = git(["checkout", "--quiet", "--detach", commit], access, "file", cwd=dest)
    if checkout.returncode != 0:
        raise RemoteError("failed", f"could not check out {commit} of {url}: {_last_line(checkout.stderr)}")
    return commit


def _clone_once(url: str, ref: str | None, dest: Path, access: RemoteAccess) -> tuple[GitRun, str]:
    """One clone attempt, and the revision that names the wanted commit in it."""
    scheme = urlsplit(url).scheme
    shallow = ["clone", "--quiet", "--no-checkout", "--depth", "1", "--no-tags"]
    if ref is not None:
        shallow += ["--branch", ref]
    done = git([*shallow, "--", url, str(dest)], access, scheme)
    # After a clone with --branch, HEAD is the ref's commit (a tag's too).
    if done.returncode != 0 and ref is not None and HEX_REF.match(ref) and _cause(done.stderr) in ("unknown_ref", "failed"):
        # Not a branch or tag: a commit id, which needs a full clone to find.
        shutil.rmtree(dest, ignore_errors=True)
        return git(["clone", "--quiet", "--no-checkout", "--", url, str(dest)], access, scheme), ref
    return done, "HEAD"


def passing_failure(done: GitRun) -> bool:
    """A failure another attempt may not meet: the network's or the server's, not
    the request's (credentials and refs are never retried)."""
    if done.returncode is None:
        return True
    low = done.stderr.lower()
    return _cause(done.stderr) not in ("auth", "unknown_ref") and any(s in low for s in _PASSING)


def _last_line(text: str) -> str:
    """The line of git's stderr that says why: the one naming a known cause (git
    follows e.g. "Permission denied (publickey)" with generic advice), else the last."""
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    markers = (*_AUTH, *_UNKNOWN_REF, *_UNREACHABLE, *_PASSING, "host key verification failed")
    telling = [line for line in lines if any(m in line.lower() for m in markers)]
    return (telling or lines or [""])[-1][:300]


# -- publish ---------------------------------------------------------------------


@dataclass(frozen=True)
class PushResult:
    outcome: PushOutcome
    commit: str
    branch: str
    message: str = ""
    duplicate: bool = False


class EffectDrift(Exception):
    """What would be pushed now is not the commit that was fixed and approved."""


@dataclass
class RemoteTarget:
    """Where a run cloned from a remote publishes: its branch on that remote, built on
    the run's base commit inside the worker's git directory (never in the sandbox).

    The commit is fixed when the publish is asked for (``plan``): tree, parent,
    author, committer, their dates and the message, so its id is known before the
    reviewer decides; pushing builds it again from that record alone (``build``) and
    pushes only if it is the same commit (core.effects)."""

    url: str
    base: str
    branch: str
    git_dir: Path
    access: RemoteAccess

    @property
    def scheme(self) -> str:
        return urlsplit(self.url).scheme

    def tree_for(self, patch: str) -> str:
        """The tree of the base with ``patch`` applied, in a throwaway index."""
        with tempfile.TemporaryDirectory(prefix="harness-publish-") as tmp:
            index = {"GIT_INDEX_FILE": str(Path(tmp) / "index")}
            _local(["read-tree", self.base], self.git_dir, self.access, index)
            if patch:
                patch_file = Path(tmp) / "change.patch"
                patch_file.write_text(patch, encoding="utf-8", errors="surrogateescape")
                _local(["apply", "--cached", "--whitespace=nowarn", str(patch_file)], self.git_dir, self.access, index)
            return _local(["write-tree"], self.git_dir, self.access, index)

    def plan(self, patch: str, message: str, trailers: Sequence[tuple[str, str]], at: float) -> PushEffect:
        """The one commit this publish would push, fixed: this server's identity,
        dated ``at``, the model's message and then, as its own last paragraph,
        Harness's trailers (the message was checked to hold no divider and no
        ``Harness-`` line, so git's trailer parser sees Harness's alone)."""
        tree = self.tree_for(patch)
        who = Identity(name=self.access.author_name, email=self.access.author_email, date=int(at))
        body = message.rstrip() + "\n\n" + "".join(f"{k}: {v}\n" for k, v in trailers)
        fixed = PushEffect(
            remote=self.url, branch=self.branch, base=self.base, tree=tree, author=who, committer=who, message=body, commit=""
        )
        return fixed.model_copy(update={"commit": self._commit_tree(fixed)})

    def _commit_tree(self, effect: PushEffect) -> str:
        env = {
            "GIT_AUTHOR_NAME": effect.author.name,
            "GIT_AUTHOR_EMAIL": effect.author.email,
            "GIT_AUTHOR_DATE": f"{effect.author.date} +0000",
            "GIT_COMMITTER_NAME": effect.committer.name,
            "GIT_COMMITTER_EMAIL": effect.committer.email,
            "GIT_COMMITTER_DATE": f"{effect.committer.date} +0000",
        }
        return _local(["commit-tree", effect.tree, "-p", effect.base, "-F", "-"], self.git_dir, self.access, env, stdin=effect.message)

    def build(self, effect: PushEffect, patch: str) -> str:
        """The fixed commit, made again from its record alone (whatever this process's
        settings say), or ``EffectDrift`` if it would not be the same commit."""
        if (effect.remote, effect.branch, effect.base) != (self.url, self.branch, self.base):
            raise EffectDrift(
                f"the approved push goes to {effect.branch} on {effect.remote}, this run's target is {self.branch} on {self.url}"
            )
        tree = self.tree_for(patch)
        if tree != effect.tree:
            raise EffectDrift(f"the workspace's tree is {tree[:12]}, the approved commit's is {effect.tree[:12]}")
        commit = self._commit_tree(effect)
        if commit != effect.commit:
            raise EffectDrift(f"the commit made now is {commit[:12]}, the approved one is {effect.commit[:12]}")
        return commit

    def _pending_ref(self, key: str) -> str:
        return f"refs/harness/pending/{key}"

    def remote_head(self) -> str | None:
        """The branch's commit on the remote, by ``ls-remote`` (authoritative)."""
        done = git(["ls-remote", "--", self.url, f"refs/heads/{self.branch}"], self.access, self.scheme)
        if done.returncode != 0:
            raise RemoteError(_cause(done.stderr) if done.returncode is not None else "unreachable", _last_line(done.stderr) or "timed out")
        for line in done.stdout.splitlines():
            sha, _, name = line.partition("\t")
            if name == f"refs/heads/{self.branch}":
                return sha
        return None

    def publish(self, key: str, effect: PushEffect, patch: str) -> PushResult:
        """Push the fixed commit; a branch already at it is this operation, done."""
        ours = self.build(effect, patch)
        head = self.remote_head()
        if head is not None:
            if head == ours:
                return PushResult("applied", head, self.branch, "the branch already holds this change", duplicate=True)
            return PushResult("rejected", head, self.branch, f"branch {self.branch} already holds another commit ({head[:12]})")
        # Recorded before the push, so a lookup after a lost answer knows what we sent.
        _local(["update-ref", self._pending_ref(key), ours], self.git_dir, self.access)
        done = git(
            ["--git-dir", str(self.git_dir), "push", "--porcelain", "--", self.url, f"{ours}:refs/heads/{self.branch}"],
            self.access,
            self.scheme,
        )
        return PushResult(_push_outcome(done), ours, self.branch, _push_message(done))

    def remember(self, key: str, effect: PushEffect, patch: str) -> str:
        """On a worker that rebuilt the run's workspace (sandbox/rebuild.py): the ref
        ``publish`` recorded before pushing, on the worker that pushed, made again from
        the fixed effect alone, so a lookup of ``key`` here knows that commit as ours.
        EffectDrift when the workspace no longer makes that commit."""
        ours = self.build(effect, patch)
        _local(["update-ref", self._pending_ref(key), ours], self.git_dir, self.access)
        return ours

    def lookup(self, key: str) -> tuple[bool, str]:
        """(applied, detail) for a push of unknown outcome; raises ``PushConflict``
        when the branch holds a commit that is not this operation's (the commit is
        fixed, so "ours" is that exact commit)."""
        found = git(["--git-dir", str(self.git_dir), "rev-parse", "--verify", "--quiet", self._pending_ref(key)], self.access, "file")
        ours = found.stdout.strip() if found.returncode == 0 else None
        head = self.remote_head()
        if head is None:
            return False, f"branch {self.branch} is absent on {self.url}: the push did not happen"
        if ours is not None and head == ours:
            return True, f"branch {self.branch} on {self.url} is at our commit {head[:12]}"
        raise PushConflict(
            f"branch {self.branch} on {self.url} is at {head[:12]}, which is not this run's commit: someone else pushed to it"
        )


def describe_push(effect: PushEffect) -> str:
    """What a reviewer is shown above the diff of a push: every part of the commit but
    its dates, which the commit id binds and the page shows beside it as it shows every
    time, in the viewer's zone (pages.approvals.commit_times)."""
    message = "".join(f"#   {shown_line(line)}".rstrip() + "\n" for line in effect.message.splitlines())
    return (
        f"# push to {effect.remote}\n# branch {effect.branch}, one commit on {effect.base[:12]}\n"
        f"# commit {effect.commit}, tree {effect.tree}\n"
        f"# author: {shown_line(effect.author.line())}\n"
        f"# committer: {shown_line(effect.committer.line())}\n"
        f"# message:\n{message}"
    )


class PushConflict(Exception):
    """The operation's branch holds somebody else's commit: the run must stop."""


def _push_outcome(done: GitRun) -> PushOutcome:
    if done.returncode == 0:
        return "applied"
    if done.returncode is None:
        return "unknown"
    said = (done.stdout + done.stderr).lower()
    if "[rejected]" in said or "[remote rejected]" in said or "! [" in said:
        return "rejected"
    if any(s in said for s in _NOT_SENT) or "returned error: 403" in said:
        return "not_applied"
    # The connection ended after the pack may have reached the server.
    return "unknown"


def _push_message(done: GitRun) -> str:
    """The server's own words: hook output (``remote:`` lines) and the ref's reason."""
    lines = [line.strip() for line in (done.stderr + "\n" + done.stdout).splitlines()]
    said = [line for line in lines if line.startswith("remote:") and line != "remote:"]
    said += [line for line in lines if line.startswith("!") or "rejected" in line or "fatal:" in line or "error:" in line]
    return "\n".join(dict.fromkeys(said))[:2000] if said else (_last_line(done.stderr) or "timed out")
