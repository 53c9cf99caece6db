"""The remote allowlist stays inside its prefixes (issue 26, finding 2): a URL is
compared by its parts, its path must be plain (no empty, '.' or '..' segment, in any
spelling), a file:// path by its real path; the same rule for the forge project a
change request targets. Real probes through git itself: a clone over file:// and
through git http-backend of each escape is refused before git runs."""

from __future__ import annotations

import os
import posixpath
from pathlib import Path
from urllib.parse import unquote

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from core.contract import WorkspaceSource
from sandbox.vcs.allowlist import UnsafeURL, allowed_entry, check_project, place_of
from sandbox.vcs.forges import ChangeRequests, ForgeAccess, ForgeError
from sandbox.vcs.remote import RemoteAccess, RemoteError, check_remote_url
from sandbox.workspace.preparation import prepare_workspace
from tests.fake_forges import FORGE_TOKEN, FakeForge
from tests.fixtures_sandbox import ROOT
from tests.gitserver import TOKEN, USER, FaultProxy, GitHttpServer, make_bare_repository, serving

ESCAPES = [
    "{base}/allowed/../private/other.git",
    "{base}/allowed/%2e%2e/private/other.git",
    "{base}/allowed/%2E%2e/private/other.git",
    "{base}/allowed/.%2e/private/other.git",
    "{base}/allowed//../private/other.git",
    "{base}/allowed/./../private/other.git",
    "{base}/allowed/%252e%252e/private/other.git",
    "{base}/allowed/..%2fprivate/other.git",
    "{base}/allowed/x/..\\..\\private/other.git",
    "{base}/allowed/shop.git/",
    "{base}/allowed/shop.git?x=/../private",
    "{base}/allowed/shop.git#/../../private",
]


def test_it_reads_old_fnmatch_entries_as_prefixes_and_refuses_other_wildcards() -> None:
    old = allowed_entry("https://git.example.com/team/*")
    assert (old.prefix, old.place.path, old.place.port) == (True, "/team/", 443)
    for url in ("https://git.example.com/team/shop.git", "https://GIT.example.com/team/sub/shop.git", "https://git.example.com:443/team/a"):
        assert check_remote_url(url, ["https://git.example.com/team/*"]) == url
    for url in (
        "https://git.example.com/teamevil/shop.git",
        "https://git.example.com:444/team/shop.git",
        "http://git.example.com/team/shop.git",
        "https://git.example.com.evil.net/team/shop.git",
        "https://git.example.com/team",
    ):
        with pytest.raises(RemoteError) as caught:
            check_remote_url(url, ["https://git.example.com/team/*"])
        assert caught.value.cause == "refused", url
    exact = allowed_entry("https://git.example.com/team/shop.git")
    assert not exact.prefix and exact.admits(place_of("https://git.example.com/team/shop.git"))
    assert not exact.admits(place_of("https://git.example.com/team/shop.git2"))
    for bad, said in {
        "https://git.example.com/team*": "must follow a '/'",
        "https://git.example.com/*/shop.git": "wildcards are not read any more",
        "http://127.0.0.1:*/acme/*": "with the port spelled out",
        "https://git.example.com/team/../*": "'..' path segment",
        "git@git.example.com:team/*": "ssh://user@host/path",
    }.items():
        with pytest.raises(UnsafeURL, match=said.replace("(", r"\(").replace("*", r"\*")):
            allowed_entry(bad)


# Path parameters (issue 39, finding 4): servers of the Tomcat/Jetty kind drop ";..."
# from a segment, so "..;" is ".." to them, whatever the allowlist made of it.
PARAMETER_ESCAPES = [
    "{base}/allowed/..;/private/other.git",
    "{base}/allowed/.;/../private/other.git",
    "{base}/allowed/%2e%2e;/private/other.git",
    "{base}/allowed/..%3b/private/other.git",
    "{base}/allowed/%2e%2e%3B/private/other.git",
    "{base}/allowed/..;jsessionid=x/private/other.git",
]


def test_it_refuses_path_parameters_in_every_spelling() -> None:
    allowed = ["http://127.0.0.1:8080/allowed/*"]
    for shape in PARAMETER_ESCAPES:
        url = shape.format(base="http://127.0.0.1:8080")
        with pytest.raises(RemoteError) as caught:
            check_remote_url(url, allowed)
        assert caught.value.cause == "malformed", url
        assert "';'" in caught.value.message, url
    with pytest.raises(UnsafeURL, match="';'"):
        allowed_entry("https://git.example.com/team;x/")
    with pytest.raises(UnsafeURL, match="';'"):
        check_project("acme/..;", "gitlab")


def test_it_fails_at_start_naming_a_wildcard_entry() -> None:
    from tests.test_settings import start

    started = start(DEBUG="1", HARNESS_GIT_ALLOWED_REMOTES="https://a.example/team/*,https://b.example/*/x.git")
    assert started.returncode != 0
    assert "HARNESS_GIT_ALLOWED_REMOTES entry 'https://b.example/*/x.git': wildcards are not read any more" in started.stderr
    assert start(DEBUG="1", HARNESS_GIT_ALLOWED_REMOTES="https://a.example/team/*,file:///srv/remotes/").returncode == 0


def test_it_refuses_every_escape_from_an_http_prefix_before_git_runs() -> None:
    allowed = ["http://127.0.0.1:8080/allowed/*"]
    for shape in ESCAPES:
        url = shape.format(base="http://127.0.0.1:8080")
        with pytest.raises(RemoteError) as caught:
            check_remote_url(url, allowed)
        assert caught.value.cause in ("malformed", "refused"), url


# -- the property ----------------------------------------------------------------

SEGMENTS = st.sampled_from(
    [
        "allowed",
        "private",
        "shop.git",
        "x",
        "..",
        ".",
        "",
        "%2e",
        "%2e%2e",
        "%2E%2E",
        ".%2e",
        "%2f",
        "%252e%252e",
        "a%2fb",
        "%5c",
        "~",
        "link",
        "..;",
        "%2e%2e%3b",
        ".;x",
    ]
)
SEPARATORS = st.sampled_from(["/", "//", "/./", "\\", "/%2f"])


def hostile_path(parts: list[str], seps: list[str]) -> str:
    return "".join(sep + part for sep, part in zip(seps, parts, strict=False))


def resolved_http(path: str) -> str:
    """The most a server could make of a path: decoded twice, path parameters dropped,
    dot segments removed, backslashes read as separators."""
    decoded = unquote(unquote(path)).replace("\\", "/")
    return posixpath.normpath("/".join(segment.split(";", 1)[0] for segment in decoded.split("/")))


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(SEGMENTS, min_size=1, max_size=6), st.lists(SEPARATORS, min_size=6, max_size=6))
def test_it_accepts_no_http_url_that_resolves_outside_its_prefix(parts: list[str], seps: list[str]) -> None:
    url = "http://127.0.0.1:8080/allowed" + hostile_path(parts, seps)
    try:
        check_remote_url(url, ["http://127.0.0.1:8080/allowed/*"])
    except RemoteError:
        return
    assert resolved_http(url.split("8080", 1)[1]).startswith("/allowed/"), url


def test_it_accepts_no_file_url_that_resolves_outside_its_prefix(tmp_path: Path) -> None:
    allowed_dir = tmp_path / "allowed"
    (allowed_dir / "x").mkdir(parents=True)
    (tmp_path / "private").mkdir()
    # A symlink inside the prefix that points out of it.
    (allowed_dir / "link").symlink_to(tmp_path / "private")
    prefix = f"file://{allowed_dir}/*"
    real_prefix = os.path.realpath(allowed_dir) + "/"

    @settings(max_examples=400, deadline=None)
    @given(st.lists(SEGMENTS, min_size=1, max_size=6), st.lists(SEPARATORS, min_size=6, max_size=6))
    def probe(parts: list[str], seps: list[str]) -> None:
        url = f"file://{allowed_dir}" + hostile_path(parts, seps)
        try:
            check_remote_url(url, [prefix])
        except RemoteError:
            return
        # Resolved as git would open it: decoded, then by the kernel (symlinks too).
        assert os.path.realpath(unquote(url[len("file://") :])).startswith(real_prefix), url

    probe()
    with pytest.raises(RemoteError):
        check_remote_url(f"file://{allowed_dir}/link/other.git", [prefix])


# -- real probes through git -------------------------------------------------------


def run_root(tmp_path: Path, url: str) -> Path:
    return tmp_path / "runs" / f"run-{abs(hash(url)) % 10**8}"


def clone(tmp_path: Path, url: str, access: RemoteAccess) -> Path:
    """The cloned workspace's files."""
    source = WorkspaceSource(kind="git", url=url, ref="main")
    return prepare_workspace(run_root(tmp_path, url), source, ROOT, (ROOT,), access).dir


def test_it_refuses_file_escapes_and_another_runs_git_directory_with_git_never_run(tmp_path: Path) -> None:
    data = tmp_path / "data"
    remotes = data / "remotes"
    remotes.mkdir(parents=True)
    (data / "private").mkdir()
    (data / "workspaces").mkdir()
    make_bare_repository(remotes, "shop.git")
    make_bare_repository(data / "private", "other.git")
    # Another run's own clone under the data directory.
    make_bare_repository(data / "workspaces", "source.git")
    (remotes / "link.git").symlink_to(data / "private" / "other.git")
    access = RemoteAccess(allowed=(f"file://{remotes}/*",), timeout_seconds=30)
    assert (clone(tmp_path, f"file://{remotes}/shop.git", access) / "total.py").exists()
    base = f"file://{data}"
    escapes = [shape.format(base=base).replace("/allowed/", "/remotes/") for shape in ESCAPES]
    escapes += [f"file://{remotes}/../workspaces/source.git", f"file://{remotes}/link.git"]
    for url in escapes:
        with pytest.raises(RemoteError) as caught:
            clone(tmp_path, url, access)
        assert caught.value.cause in ("malformed", "refused"), url
        assert not any(run_root(tmp_path, url).rglob("*.py")), url


def test_it_refuses_http_escapes_before_any_request_reaches_git_http_backend(tmp_path: Path) -> None:
    root = tmp_path / "server"
    (root / "allowed").mkdir(parents=True)
    (root / "secret").mkdir()
    make_bare_repository(root / "allowed", "shop.git")
    make_bare_repository(root / "secret", "repo.git")
    server = GitHttpServer(root)
    proxy = FaultProxy(server)
    with serving(server, proxy):
        access = RemoteAccess(allowed=(proxy.url("allowed/*"),), token=TOKEN, token_user=USER, timeout_seconds=30)
        clone(tmp_path, proxy.url("allowed/shop.git"), access)
        assert proxy.seen, "the allowed clone went through the proxy"
        proxy.seen.clear()
        for shape in ESCAPES:
            url = shape.format(base=f"http://127.0.0.1:{proxy.port}")
            url = url.replace("private/other.git", "secret/repo.git")
            with pytest.raises(RemoteError):
                clone(tmp_path, url, access)
        assert proxy.seen == [], "git sent nothing for a refused URL"


def test_it_refuses_a_forge_project_that_is_not_plain_names_before_asking_the_forge() -> None:
    for project, kind in [("acme/../admin", "github"), ("acme/shop/x", "github"), ("a%2e%2e/b", "gitlab"), ("acme//shop", "gitlab")]:
        with pytest.raises(UnsafeURL):
            check_project(project, kind)
    assert check_project("group/sub/project", "gitlab") == "group/sub/project"
    with FakeForge("github", "acme/shop") as forge:
        access = ForgeAccess("github", forge.api_url, forge.web_url, token=FORGE_TOKEN, timeout_seconds=5)
        escaped = ChangeRequests(access, access.project_of("http://127.0.0.1:1/acme/../admin/x.git"), "harness/t-1", "main")
        with pytest.raises(ForgeError) as caught:
            escaped.open("title", "body")
        assert caught.value.failure == "refused" and "'..' path segment" in caught.value.message
        assert forge.requests == []
