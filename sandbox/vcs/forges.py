"""Change requests on a forge: a pull request on GitHub (PyGithub) or a merge request
on GitLab (python-gitlab), from a run's pushed branch into its base branch.

Which forge, its API and web URLs and its token come from server configuration
(``HARNESS_FORGE*``); the project is the configured one or the path of the run's
remote. The token is used by the worker's HTTP client only: it never enters the
sandbox, a receipt, an event, the report or a page, and no error message carries it.

The forge itself is the authority on what exists: before creating, the open requests
from the run's branch are looked up, so an operation that already happened (even one
whose answer was lost) is found and reported, never made twice."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol
from urllib.parse import quote, urlsplit

import requests

from core.effects import ChangeRequestEffect, shown_line
from sandbox.vcs.allowlist import UnsafeURL, check_project

ForgeKind = Literal["github", "gitlab"]
FORGE_KINDS: tuple[ForgeKind, ...] = ("github", "gitlab")
# What a failed forge call means: ``not_sent`` nothing reached the forge (retry);
# ``refused`` the forge said no (a failed effect, its message kept); ``unknown`` the
# forge may have acted (a pending effect, reconciled by looking the request up).
Failure = Literal["not_sent", "refused", "unknown"]


class ForgeError(Exception):
    def __init__(self, failure: Failure, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.failure = failure
        self.message = message
        self.status = status


@dataclass(frozen=True)
class ForgeAccess:
    """The server's side of a forge: where its API is, where its pages are, and the token."""

    kind: ForgeKind
    api_url: str
    web_url: str
    # Out of repr: a logged ForgeAccess must not carry the credential.
    token: str = field(default="", repr=False)
    # "owner/repo" (GitHub) or "group/project" (GitLab); None: the remote URL's path.
    project: str | None = None
    timeout_seconds: float = 30.0

    @classmethod
    def from_settings(cls, s: object, with_token: bool = True) -> ForgeAccess | None:
        """The configured forge, or None; ``with_token=False`` for what only links to
        its pages (the web process never needs to read the token)."""
        kind = str(getattr(s, "FORGE", "") or "")
        if not kind:
            return None
        if kind not in FORGE_KINDS:
            raise ValueError(f"HARNESS_FORGE must be one of {', '.join(FORGE_KINDS)}; got {kind!r}")
        token = ""
        if with_token:
            token_file = getattr(s, "FORGE_TOKEN_FILE", None)
            token = Path(token_file).read_text().strip() if token_file else str(getattr(s, "FORGE_TOKEN", "") or "")
        return cls(
            kind=kind,
            api_url=str(getattr(s, "FORGE_API_URL")),  # noqa: B009 - s is any settings object
            web_url=str(getattr(s, "FORGE_WEB_URL")).rstrip("/"),  # noqa: B009
            token=token,
            project=getattr(s, "FORGE_PROJECT", None) or None,
            timeout_seconds=float(getattr(s, "FORGE_TIMEOUT_SECONDS", 30.0)),
        )

    def project_of(self, remote_url: str) -> str:
        """The forge project a run's remote belongs to."""
        if self.project:
            return self.project
        path = urlsplit(remote_url).path.strip("/")
        return path[: -len(".git")] if path.endswith(".git") else path

    def web_link(self, url: object) -> str:
        """``url`` if it is a page of the configured forge, else "" (never a link elsewhere)."""
        if isinstance(url, str) and url.startswith(self.web_url + "/") and not any(c.isspace() or c in "\"'<>" for c in url):
            return url
        return ""

    def branch_link(self, project: str, branch: str) -> str:
        tree = "tree" if self.kind == "github" else "-/tree"
        return f"{self.web_url}/{quote(project)}/{tree}/{quote(branch)}"


@dataclass(frozen=True)
class ChangeRequest:
    number: int  # the pull request's number, the merge request's iid
    url: str  # its page on the forge
    source: str
    target: str
    title: str

    def as_json(self) -> dict[str, Any]:
        return {"number": self.number, "url": self.url, "source": self.source, "target": self.target, "title": self.title}


class ForgeClient(Protocol):
    def default_branch(self) -> str: ...

    def open_requests(self, source: str) -> list[ChangeRequest]: ...

    def create(self, source: str, target: str, title: str, body: str) -> ChangeRequest: ...


def _network_failure(exc: requests.RequestException, writing: bool) -> ForgeError:
    """Whether a request that got no answer may have reached the forge: a refused or
    timed-out connection did not; a read timeout or a dropped connection after the
    request was sent may have, for a write."""
    not_sent = isinstance(exc, requests.ConnectTimeout) or (
        isinstance(exc, requests.ConnectionError) and "NewConnectionError" in repr(exc.args)
    )
    failure: Failure = "not_sent" if not_sent or not writing else "unknown"
    said = "the forge could not be reached" if not_sent else "the forge's answer was lost"
    return ForgeError(failure, f"{said} ({type(exc).__name__})")


def _refusal(status: int, message: str, writing: bool) -> ForgeError:
    if status in (401, 403):
        return ForgeError("refused", f"the forge refused the server's token ({status}): {message}", status)
    if status >= 500:
        # A gateway's 5xx may come after the forge acted on a write.
        return ForgeError("unknown" if writing else "not_sent", f"the forge failed ({status}): {message}", status)
    return ForgeError("refused", f"the forge refused the request ({status}): {message}", status)


class GitHubClient:
    """Pull requests through PyGithub: GET /repos/{owner}/{repo}, GET .../pulls?head=owner:branch&state=open,
    POST .../pulls."""

    def __init__(self, access: ForgeAccess, project: str) -> None:
        from github import Auth, Github

        self.owner = project.split("/", 1)[0]
        self.project = project
        # No retries inside the client: a write is never resent blindly; the harness
        # decides, after looking the request up.
        self._github = Github(
            base_url=access.api_url.rstrip("/"),
            auth=Auth.Token(access.token),
            timeout=max(1, round(access.timeout_seconds)),  # PyGithub takes whole seconds
            retry=None,
            seconds_between_requests=None,
            seconds_between_writes=None,
            user_agent="Harness",
        )
        self._repository: Any = None

    def _call(self, writing: bool, action: Callable[[], Any]) -> Any:
        from github import GithubException

        try:
            return action()
        except GithubException as exc:
            data = exc.data if isinstance(exc.data, dict) else {}
            errors = data.get("errors")
            detail = (
                "; ".join(str(e.get("message", e)) if isinstance(e, dict) else str(e) for e in errors) if isinstance(errors, list) else ""
            )
            message = str(data.get("message") or "") + (f": {detail}" if detail else "")
            raise _refusal(exc.status, message or "no message", writing) from None
        except requests.RequestException as exc:
            raise _network_failure(exc, writing) from None

    def _repo(self) -> Any:
        if self._repository is None:
            self._repository = self._call(False, lambda: self._github.get_repo(self.project))
        return self._repository

    def default_branch(self) -> str:
        return str(self._repo().default_branch)

    def open_requests(self, source: str) -> list[ChangeRequest]:
        pulls = self._call(False, lambda: list(self._repo().get_pulls(state="open", head=f"{self.owner}:{source}")))
        return [_pull(p) for p in pulls if p.head.ref == source]

    def create(self, source: str, target: str, title: str, body: str) -> ChangeRequest:
        repo = self._repo()
        return _pull(self._call(True, lambda: repo.create_pull(base=target, head=source, title=title, body=body)))


def _pull(pull: Any) -> ChangeRequest:
    return ChangeRequest(int(pull.number), str(pull.html_url), str(pull.head.ref), str(pull.base.ref), str(pull.title))


class GitLabClient:
    """Merge requests through python-gitlab: GET /api/v4/projects/:id,
    GET .../merge_requests?source_branch=&state=opened, POST .../merge_requests."""

    def __init__(self, access: ForgeAccess, project: str) -> None:
        import gitlab

        self.project = project
        self._gitlab = gitlab.Gitlab(
            url=access.api_url.rstrip("/"),
            private_token=access.token,
            timeout=access.timeout_seconds,
            retry_transient_errors=False,
            user_agent="Harness",
        )
        # lazy: no request until one is needed; the id is the URL-encoded path.
        self._project = self._gitlab.projects.get(project, lazy=True)

    def _call(self, writing: bool, action: Callable[[], Any]) -> Any:
        from gitlab.exceptions import GitlabError

        try:
            return action()
        except GitlabError as exc:
            if exc.response_code is None:
                raise ForgeError("not_sent" if not writing else "unknown", f"the forge's answer was unreadable: {exc}") from None
            raise _refusal(int(exc.response_code), str(exc.error_message), writing) from None
        except requests.RequestException as exc:
            raise _network_failure(exc, writing) from None

    def default_branch(self) -> str:
        return str(self._call(False, lambda: self._gitlab.projects.get(self.project)).default_branch)

    def open_requests(self, source: str) -> list[ChangeRequest]:
        found = self._call(False, lambda: self._project.mergerequests.list(source_branch=source, state="opened", get_all=True))
        return [_merge_request(m) for m in found if m.source_branch == source]

    def create(self, source: str, target: str, title: str, body: str) -> ChangeRequest:
        data = {"source_branch": source, "target_branch": target, "title": title, "description": body}
        return _merge_request(self._call(True, lambda: self._project.mergerequests.create(data)))


def _merge_request(mr: Any) -> ChangeRequest:
    return ChangeRequest(int(mr.iid), str(mr.web_url), str(mr.source_branch), str(mr.target_branch), str(mr.title))


CLIENTS: dict[ForgeKind, Callable[[ForgeAccess, str], ForgeClient]] = {"github": GitHubClient, "gitlab": GitLabClient}


@dataclass(frozen=True)
class Opened:
    request: ChangeRequest
    duplicate: bool  # it was already open: found, not created


@dataclass
class ChangeRequests:
    """Where a run opens its change request: its remote's project on the forge, from
    the run's branch into ``target`` (the branch the run was cloned from; None: the
    forge's default branch)."""

    access: ForgeAccess
    project: str
    source: str
    target: str | None
    _client: ForgeClient | None = field(default=None, repr=False)

    def checked_project(self) -> str:
        """The project, refused (``ForgeError``) unless it is plain names
        (``sandbox.vcs.allowlist.check_project``): it becomes a path of the forge's API."""
        try:
            return check_project(self.project, self.access.kind)
        except UnsafeURL as exc:
            raise ForgeError("refused", str(exc)) from None

    def client(self) -> ForgeClient:
        if self._client is None:
            self._client = CLIENTS[self.access.kind](self.access, self.checked_project())
        return self._client

    def target_branch(self) -> str:
        return self.target if self.target is not None else self.client().default_branch()

    def find(self) -> ChangeRequest | None:
        """The open request from the run's branch, by asking the forge (authoritative)."""
        found = self.client().open_requests(self.source)
        return found[0] if found else None

    def open(self, title: str, body: str) -> Opened:
        existing = self.find()
        if existing is not None:
            return Opened(existing, duplicate=True)
        return Opened(self.client().create(self.source, self.target_branch(), title, body), duplicate=False)


def describe_change_request(effect: ChangeRequestEffect) -> str:
    """What a reviewer is shown of a fixed change request: where it opens, from which
    branch into which, and the text, every line of it marked as quoted and any
    character that could break a line or hide text escaped (a title cannot hold
    one: core.tools refuses it; the body is quoted line by line)."""
    noun = "pull request" if effect.forge == "github" else "merge request"
    target = effect.target or "the project's default branch (the forge could not be asked when this was filed)"
    quoted = "".join(f"#   {shown_line(line)}".rstrip() + "\n" for line in effect.body.splitlines()) or "#   (empty)\n"
    return (
        f"# open a {noun} on {effect.web_url}/{effect.project}\n"
        f"# from branch {effect.source} into {target}\n"
        f"# title: {shown_line(effect.title)}\n# body:\n{quoted}"
    )
