"""Which git remotes a run may use, and which forge projects it may open change
requests on: a rule over the parts of a URL, never a pattern over its text.

An allowed entry (``HARNESS_GIT_ALLOWED_REMOTES``) is a scheme, a host and port (no
host for ``file://``) and either a path prefix ending in ``/`` (everything under that
directory) or one exact repository path. A remote is allowed when its scheme, host,
port and user are the entry's and its path lies under the prefix (or is the exact
path). Before that comparison a path must be plain: no empty, ``.`` or ``..``
segment, no ``;`` (a path parameter: ``..;`` is ``..`` to servers of the Tomcat
kind), no backslash, no percent-escape that decodes to a separator, a dot segment
or another escape; a ``file://`` path is then compared by its resolved real path, so
neither ``..``, its encodings nor a symlink reach outside the prefix. (fnmatch over
the whole URL let ``*`` match ``/..``: docs/design.md, Trust boundaries.)

Entries written for the old reading, fnmatch patterns such as
``https://git.example.com/team/*``, keep working: a trailing ``*`` (or ``**``) after a
``/`` is read as that prefix. Any other wildcard is refused when the settings load,
with the entry and the way to write it."""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from urllib.parse import SplitResult, unquote, urlsplit

SCHEMES = ("https", "ssh", "file", "http")
DEFAULT_PORTS = {"https": 443, "http": 80, "ssh": 22}
_WILDCARDS = re.compile(r"[*?\[\]]")
# What a forge names a project by: owner/repository (GitHub), group/.../project (GitLab).
_PROJECT_SEGMENT = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$")


class UnsafeURL(ValueError):
    """A URL (or an allowed entry) that does not name one place plainly."""


@dataclass(frozen=True)
class Place:
    """Where a URL points, compared part by part."""

    scheme: str
    user: str | None
    host: str  # lower case; "" for file://
    port: int | None  # the effective port; None for file://
    path: str  # decoded, "/"-separated, absolute; the real path for file://


@dataclass(frozen=True)
class AllowedRemote:
    entry: str  # as configured, for messages
    place: Place
    prefix: bool  # True: place.path ends in "/" and everything under it is allowed

    def admits(self, place: Place) -> bool:
        mine = self.place
        if (mine.scheme, mine.user, mine.host, mine.port) != (place.scheme, place.user, place.host, place.port):
            return False
        return place.path.startswith(mine.path) if self.prefix else place.path == mine.path


def plain_segments(path: str, what: str, directory: bool = False) -> list[str]:
    """The decoded segments of an absolute URL path, refusing anything that is not one
    plain name per segment (the rule for remotes and forge projects alike). With
    ``directory`` the path ends in "/" (an allowed prefix), and may be "/" alone."""
    if not path.startswith("/"):
        raise UnsafeURL(f"{what}: the path must be absolute")
    body = path[1:]
    if directory:
        if not body.endswith("/") and body:
            raise UnsafeURL(f"{what}: a prefix must end in '/'")
        body = body[:-1]
        if not body:
            return []
    segments = []
    for raw in body.split("/"):
        if "\\" in raw:
            raise UnsafeURL(f"{what}: a backslash in a path segment")
        try:
            name = unquote(raw, errors="strict") if "%" in raw else raw
        except UnicodeDecodeError:
            raise UnsafeURL(f"{what}: the segment {raw!r} is not percent-encoded UTF-8") from None
        if name in ("", ".", ".."):
            shown = "an empty" if name == "" else f"a {name!r}"
            raise UnsafeURL(f"{what}: {shown} path segment{' (percent-encoded)' if raw != name else ''}")
        if ";" in name:
            # A path parameter: servers of the Tomcat/Jetty kind drop ";..." from a
            # segment, so "..;" (or "%2e%2e%3b") is ".." to them.
            raise UnsafeURL(f"{what}: the segment {raw!r} holds a ';' (a path parameter, which some servers read as a dot segment)")
        if any(c in name for c in "/\\%") or any(ord(c) < 32 or ord(c) == 127 for c in name):
            raise UnsafeURL(f"{what}: the segment {raw!r} decodes to a separator, an escape or a control character")
        segments.append(name)
    return segments


def _split(url: str, what: str) -> SplitResult:
    if any(c.isspace() or ord(c) < 32 or ord(c) == 127 for c in url) or url.startswith("-") or "\\" in url:
        raise UnsafeURL(f"{what}: spaces, control characters, backslashes or a leading '-'")
    parts = urlsplit(url)
    if parts.scheme not in SCHEMES:
        hint = " (write scp-like addresses as ssh://user@host/path)" if "@" in url and ":" in url else ""
        raise UnsafeURL(f"{what}: a remote URL must start with https://, http://, ssh:// or file://{hint}")
    if "?" in url or "#" in url:
        raise UnsafeURL(f"{what}: a query or fragment does not belong in a remote URL")
    if parts.password is not None or (parts.username is not None and parts.scheme != "ssh"):
        raise UnsafeURL(f"{what}: credentials do not belong in the URL; the server supplies them")
    return parts


def place_of(url: str, what: str = "", directory: bool = False) -> Place:
    """Where ``url`` points, or ``UnsafeURL`` naming why it cannot be trusted to say.
    With ``directory``, ``url`` is a prefix and its place's path ends in "/"."""
    what = what or repr(url)
    parts = _split(url, what)
    if parts.scheme == "file":
        if parts.netloc:
            raise UnsafeURL(f"{what}: a file URL must be file:///absolute/path")
        segments = plain_segments(parts.path, what, directory)
        # Resolved: neither a symlink nor any spelling of ".." leaves the prefix.
        real = os.path.realpath("/" + "/".join(segments))
        return Place("file", None, "", None, real.rstrip("/") + "/" if directory else real)
    if not parts.hostname or (parts.path in ("", "/") and not directory):
        raise UnsafeURL(f"{what}: a remote URL needs a host and a repository path")
    try:
        port = parts.port or DEFAULT_PORTS[parts.scheme]
    except ValueError as exc:
        raise UnsafeURL(f"{what}: {exc}") from None
    segments = plain_segments(parts.path or "/", what, directory)
    path = "/" + "/".join(segments)
    return Place(parts.scheme, parts.username, parts.hostname.lower(), port, path.rstrip("/") + "/" if directory else path)


def allowed_entry(entry: str, setting: str = "HARNESS_GIT_ALLOWED_REMOTES") -> AllowedRemote:
    """One entry of the list ``setting`` names, read as described above; ``UnsafeURL``
    says how to fix it."""
    what = f"{setting} entry {entry!r}"
    text = entry
    if text.endswith("*"):
        text = text.rstrip("*")
        if not text.endswith("/"):
            raise UnsafeURL(f"{what}: a trailing '*' must follow a '/' (write the directory, ending in '/')")
    if _WILDCARDS.search(text):
        raise UnsafeURL(
            f"{what}: wildcards are not read any more; write a prefix ending in '/' (e.g. https://host/team/) "
            "or one exact repository URL, with the port spelled out"
        )
    prefix = text.endswith("/")
    return AllowedRemote(entry, place_of(text, what, directory=prefix), prefix)


def allowlist(entries: Iterable[str], setting: str = "HARNESS_GIT_ALLOWED_REMOTES") -> tuple[AllowedRemote, ...]:
    return tuple(allowed_entry(e, setting) for e in entries)


def admitted(url: str, allowed: Sequence[AllowedRemote]) -> bool:
    """Whether the plain URL ``url`` (``place_of`` raises for one that is not) is under
    one of the allowed entries."""
    place = place_of(url)
    return any(a.admits(place) for a in allowed)


def check_project(project: str, kind: str) -> str:
    """A forge project name, refused unless it is plain segments of a forge's own
    characters (so it cannot walk the forge's API paths): ``owner/repo`` on GitHub,
    ``group/.../project`` on GitLab."""
    if any(ord(c) < 32 or ord(c) == 127 for c in project):
        raise UnsafeURL(f"forge project {project!r}: control characters")
    plain_segments("/" + project, f"forge project {project!r}")
    segments = project.split("/")  # as written: an escape is no name's character
    odd = [s for s in segments if not _PROJECT_SEGMENT.match(s) or s.endswith((".git", ".atom"))]
    if odd:
        raise UnsafeURL(f"forge project {project!r}: {odd[0]!r} is not a project or owner name")
    if (kind == "github" and len(segments) != 2) or len(segments) < 2:
        shape = "owner/repository" if kind == "github" else "group/project"
        raise UnsafeURL(f"forge project {project!r}: must be {shape}")
    return project
