"""Real repositories in and out: a workspace cloned from a git remote, and publish
pushing one commit to a branch there. Against a real git server on loopback (git
http-backend behind basic auth, a fault proxy in front) and file:// repositories."""

from __future__ import annotations

import json
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from pytest_django import Settings

from core.contract import WorkspaceSource
from core.errors import InputError
from core.state import PendingEffect
from sandbox.executor import SandboxExecutor
from sandbox.tools.context import ToolSettings
from sandbox.vcs.remote import GitRun, RemoteAccess, RemoteError, RemoteTarget, check_remote_url, passing_failure
from sandbox.workspace.preparation import prepare_workspace
from sandbox.workspace.run_workspace import RunWorkspace
from tests.fixtures_sandbox import ROOT, fixed_call, make_call, shown
from tests.gitserver import HOOK_MESSAGE, TOKEN, USER, FaultProxy, GitHttpServer, make_bare_repository, reject_pushes, serving, sh

FIX = (
    "def total(prices):\n    if any(p < 0 for p in prices):\n        raise ValueError('negative price')\n    return round(sum(prices), 2)\n"
)


@dataclass
class Remote:
    root: Path
    commits: dict[str, str]
    server: GitHttpServer
    proxy: FaultProxy

    @property
    def bare(self) -> Path:
        return Path(self.commits["path"])

    def access(self, token: str = TOKEN) -> RemoteAccess:
        return RemoteAccess(
            allowed=(self.server.url("shop.git"), self.proxy.url("shop.git"), "file:///"),
            token=token,
            token_user=USER,
            author_name="Harness Bot",
            author_email="bot@harness.example",
            timeout_seconds=30,
        )


@pytest.fixture
def remote(tmp_path: Path) -> Iterator[Remote]:
    root = tmp_path / "server"
    root.mkdir()
    commits = make_bare_repository(root)
    server = GitHttpServer(root)
    proxy = FaultProxy(server)
    with serving(server, proxy):
        yield Remote(root, commits, server, proxy)


def clone_run(tmp_path: Path, url: str, ref: str | None, access: RemoteAccess) -> RunWorkspace:
    source = WorkspaceSource(kind="git", url=url, ref=ref)
    return prepare_workspace(tmp_path / f"run-{uuid.uuid4().hex[:6]}", source, ROOT, (ROOT,), access)


def changed_run(remote: Remote, url: str, tmp_path: Path) -> SandboxExecutor:
    """A run cloned from ``url`` at main with total.py fixed, publishing to that remote."""
    from runs.persistence.artifacts import ArtifactStorage
    from runs.persistence.outbox import DatabaseOutbox

    workspace = clone_run(tmp_path, url, "main", remote.access())
    workspace.write_file("total.py", FIX)
    target = RemoteTarget(
        url=url,
        base=str(workspace.source["commit"]),
        branch="harness/fix-totals-1a2b3c4d",
        git_dir=workspace.remote_git,
        access=remote.access(),
    )
    return SandboxExecutor(
        "run-1a2b3c4d", workspace, None, ArtifactStorage(), DatabaseOutbox(), ToolSettings(write_paths=("*",), remote=target)
    )


def publish(executor: SandboxExecutor, key: str, message: str = "Refuse negative prices\n\nThey made refunds.") -> dict[str, Any]:
    receipt = executor.execute(fixed_call(executor, "publish", {"message": message}, key))
    assert isinstance(receipt, dict)
    return receipt


def pending(key: str) -> PendingEffect:
    return PendingEffect(call_id="c1", tool="publish", args={}, kind="external", idempotency_key=key, reason="lost", recorded_at=0)


def in_bare(remote: Remote, *args: str) -> str:
    return sh(*args, cwd=remote.bare)


def branch_updates(remote: Remote, branch: str = "harness/fix-totals-1a2b3c4d") -> int:
    log = remote.bare / "logs" / "refs" / "heads" / branch
    return len(log.read_text().splitlines()) if log.exists() else 0


# -- clone -----------------------------------------------------------------------


def test_it_clones_a_branch_and_a_tag_over_authenticated_http(remote: Remote, tmp_path: Path) -> None:
    url = remote.server.url("shop.git")
    at_feature = clone_run(tmp_path, url, "feature", remote.access())
    assert at_feature.source["commit"] == remote.commits["feature"] and at_feature.source["url"] == url
    assert (at_feature.dir / "feature.txt").read_text() == "wip\n" and not (at_feature.dir / ".git").exists()
    git_dir = at_feature.remote_git
    assert sh("--git-dir", str(git_dir), "rev-parse", "--is-shallow-repository") == "true"
    at_tag = clone_run(tmp_path, url, "v1", remote.access())
    assert at_tag.source["commit"] == remote.commits["first"]
    assert "round" not in (at_tag.dir / "total.py").read_text()
    default = clone_run(tmp_path, url, None, remote.access())
    assert default.source["commit"] == remote.commits["main"]
    # The credential is nowhere in what the run keeps: not the workspace, not the
    # record of its source, not the kept git directory's configuration.
    for run in (at_feature, at_tag, default):
        for path in run.root.rglob("*"):
            if path.is_file():
                assert TOKEN.encode() not in path.read_bytes(), path


def test_it_clones_a_file_remote_at_a_commit_id(remote: Remote, tmp_path: Path) -> None:
    url = f"file://{remote.bare}"
    workspace = clone_run(tmp_path, url, remote.commits["first"], remote.access())
    assert workspace.source["commit"] == remote.commits["first"]
    assert (workspace.dir / "README.md").read_text() == "# Shop\n"


def test_it_names_an_unknown_ref_and_failed_authentication(remote: Remote, tmp_path: Path) -> None:
    url = remote.server.url("shop.git")
    with pytest.raises(RemoteError) as unknown:
        clone_run(tmp_path, url, "no-such-branch", remote.access())
    assert unknown.value.cause == "unknown_ref" and "no-such-branch" in unknown.value.message
    assert unknown.value.problems[0].field == "workspace.ref"
    with pytest.raises(RemoteError) as refused:
        clone_run(tmp_path, url, "main", remote.access(token="wrong-token"))
    assert refused.value.cause == "auth" and "authentication failed" in refused.value.message
    assert "wrong-token" not in refused.value.message
    assert not list(tmp_path.glob("run-*")), "a failed clone leaves no workspace behind"


def test_it_clones_the_example_remote_the_script_makes(tmp_path: Path) -> None:
    made = subprocess.run(["sh", str(ROOT / "examples/remote/make_remote.sh"), str(tmp_path / "ex")], capture_output=True, text=True)
    assert made.returncode == 0, made.stderr
    source = json.loads((tmp_path / "ex" / "contract.json").read_text())["workspace"]
    assert source == {"kind": "git", "url": f"file://{tmp_path / 'ex' / 'orders.git'}", "ref": "main"}
    workspace = clone_run(tmp_path, source["url"], source["ref"], RemoteAccess(allowed=(f"file://{tmp_path}/*",)))
    assert (workspace.dir / "orders" / "total.py").read_text() == (ROOT / "examples/orders/orders/total.py").read_text()
    assert "tok-secret" not in repr(RemoteAccess(token="tok-secret"))


def test_it_fails_at_start_naming_a_malformed_author_or_remote_list() -> None:
    from tests.test_settings import start

    bad_author = start(DEBUG="1", HARNESS_GIT_AUTHOR="just a name")
    assert bad_author.returncode != 0 and "HARNESS_GIT_AUTHOR must look like 'Name <email@host>'" in bad_author.stderr
    bad_list = start(DEBUG="1", HARNESS_GIT_ALLOWED_REMOTES="https://a/*,,https://b/*")
    assert bad_list.returncode != 0 and "HARNESS_GIT_ALLOWED_REMOTES must be a comma-separated list" in bad_list.stderr


def test_it_refuses_remotes_not_allowed_and_malformed_urls(tmp_path: Path) -> None:
    allowed = ("https://git.example.com/team/*",)
    assert check_remote_url("https://git.example.com/team/shop.git", allowed)
    cases = {
        "https://evil.example.com/team/shop.git": "refused",
        "https://user:pw@git.example.com/team/shop.git": "malformed",
        "git@git.example.com:team/shop.git": "malformed",
        "ext::sh -c touch% /tmp/pwned": "malformed",
        "--upload-pack=touch /tmp/x": "malformed",
        "https://git.example.com": "malformed",
        "file://relative/path": "malformed",
    }
    for url, cause in cases.items():
        with pytest.raises(RemoteError) as caught:
            check_remote_url(url, allowed)
        assert caught.value.cause == cause, url
        assert isinstance(caught.value, InputError) and caught.value.problems[0].field == "workspace.url"
    with pytest.raises(RemoteError, match="HARNESS_GIT_ALLOWED_REMOTES"):
        clone_run(tmp_path, "https://evil.example.com/team/shop.git", None, RemoteAccess(allowed=allowed))


# -- publish ---------------------------------------------------------------------


def test_it_pushes_exactly_the_approved_commit_once(remote: Remote, tmp_path: Path, db: None) -> None:
    url = remote.server.url("shop.git")
    executor = changed_run(remote, url, tmp_path)
    key = "a" * 32
    text = shown(executor, "publish", {"message": "Refuse negative prices\n\nThey made refunds."}, key)
    assert text.startswith(f"# push to {url}\n# branch harness/fix-totals-1a2b3c4d, one commit on {remote.commits['main'][:12]}\n")
    # The dates are the page's to show, in the viewer's zone (pages.approvals.commit_times).
    assert "# author: Harness Bot <bot@harness.example>\n" in text
    assert "# committer: Harness Bot <bot@harness.example>\n# message:\n#   Refuse negative prices\n" in text
    assert "+        raise ValueError('negative price')" in text
    first = publish(executor, key)
    assert (first["status"], first["effect"]) == ("ok", "applied"), first
    commit = first["data"]["commit"]
    assert first["data"]["branch"] == "harness/fix-totals-1a2b3c4d" and first["data"]["remote"] == url
    assert in_bare(remote, "rev-parse", "refs/heads/harness/fix-totals-1a2b3c4d") == commit
    # The tree is the workspace's revision; the parent is the base the run cloned.
    assert in_bare(remote, "rev-parse", f"{commit}^{{tree}}") == executor.revision()
    assert in_bare(remote, "log", "-1", "--format=%P", commit) == remote.commits["main"]
    assert in_bare(remote, "log", "-1", "--format=%an <%ae>|%cn <%ce>", commit) == (
        "Harness Bot <bot@harness.example>|Harness Bot <bot@harness.example>"
    )
    message = in_bare(remote, "log", "-1", "--format=%B", commit)
    assert message.startswith("Refuse negative prices\n\nThey made refunds.\n")
    trailers = [t for t in in_bare(remote, "log", "-1", "--format=%(trailers:only)", commit).splitlines() if t]
    assert trailers == ["Harness-Run: run-1a2b3c4d", f"Harness-Operation: {key}"]
    # The commit shown to the reviewer is the one pushed, id and all.
    assert f"# commit {commit}, tree {executor.revision()}\n" in text
    assert in_bare(remote, "diff", "--name-only", remote.commits["main"], commit) == "total.py"
    pushes = len(remote.server.pushes)
    again = publish(executor, key)
    assert (again["status"], again["effect"], again["data"]["duplicate"], again["data"]["commit"]) == ("ok", "none", True, commit)
    assert len(remote.server.pushes) == pushes == 1, "publishing the same operation again pushes nothing"
    assert branch_updates(remote) == 1
    looked = executor.reconcile(pending(key))
    assert (looked.resolved, looked.applied, looked.conflict) == (True, True, False)


def test_it_reconciles_a_push_whose_answer_was_lost_as_applied(remote: Remote, tmp_path: Path, db: None) -> None:
    url = remote.proxy.url("shop.git")
    executor = changed_run(remote, url, tmp_path)
    key = "b" * 32
    remote.proxy.drop_push_answer = True
    lost = publish(executor, key)
    assert (lost["status"], lost["effect"]) == ("unknown", "unknown"), lost
    assert "outcome is unknown" in lost["data"]["error"]
    # The server did apply it (git's HTTP client may resend the request on the
    # dropped connection; the server refuses the repeat as the branch now exists).
    assert branch_updates(remote) == 1
    pushed = in_bare(remote, "rev-parse", "refs/heads/harness/fix-totals-1a2b3c4d")
    remote.proxy.drop_push_answer = False
    found = executor.reconcile(pending(key))
    assert (found.resolved, found.applied, found.authoritative, found.conflict) == (True, True, True, False)
    assert pushed[:12] in found.detail
    again = publish(executor, key)
    assert (again["effect"], again["data"]["duplicate"], again["data"]["commit"]) == ("none", True, pushed)
    assert branch_updates(remote) == 1, "nothing is pushed twice"
    asked = executor.execute(make_call("lookup_publish", {"idempotency_key": key}))
    assert isinstance(asked, dict) and (asked["data"]["found"], asked["data"]["authoritative"]) == (True, True)


def test_it_takes_a_push_cut_off_by_its_timeout_as_unknown_and_looks_it_up(remote: Remote, tmp_path: Path, db: None) -> None:
    url = remote.proxy.url("shop.git")
    executor = changed_run(remote, url, tmp_path)
    assert executor.context.settings.remote is not None
    executor.context.settings.remote.access = RemoteAccess(**{**vars(remote.access()), "timeout_seconds": 3.0})
    remote.proxy.drop_push_answer, remote.proxy.hold_seconds = True, 8.0
    key = "e" * 32
    cut = publish(executor, key)
    assert (cut["status"], cut["effect"]) == ("unknown", "unknown"), cut
    remote.proxy.drop_push_answer = False
    found = executor.reconcile(pending(key))
    assert (found.resolved, found.applied) == (True, True) and branch_updates(remote) == 1


def test_it_reconciles_an_absent_branch_as_not_applied_and_another_commit_as_a_conflict(remote: Remote, tmp_path: Path, db: None) -> None:
    url = f"file://{remote.bare}"
    executor = changed_run(remote, url, tmp_path)
    absent = executor.reconcile(pending("c" * 32))
    assert (absent.resolved, absent.applied, absent.conflict) == (True, False, False)
    # Somebody else's commit on the operation's branch.
    in_bare(remote, "update-ref", "refs/heads/harness/fix-totals-1a2b3c4d", remote.commits["feature"])
    clash = executor.reconcile(pending("c" * 32))
    assert clash.conflict and "not this run's commit" in clash.detail and "harness/fix-totals-1a2b3c4d" in clash.detail
    # Publishing onto it is refused without touching it.
    refused = publish(executor, "c" * 32)
    assert (refused["status"], refused["effect"], refused["data"]["rejected"]) == ("ok", "none", True)
    assert "already holds another commit" in refused["data"]["error"]
    assert in_bare(remote, "rev-parse", "refs/heads/harness/fix-totals-1a2b3c4d") == remote.commits["feature"]


def test_it_reports_a_push_refused_by_a_hook_as_a_failed_effect(remote: Remote, tmp_path: Path, db: None) -> None:
    url = remote.server.url("shop.git")
    executor = changed_run(remote, url, tmp_path)
    reject_pushes(remote.bare)
    refused = publish(executor, "d" * 32)
    assert (refused["status"], refused["effect"], refused["data"]["rejected"]) == ("ok", "none", True), refused
    assert HOOK_MESSAGE in refused["data"]["error"] and "pre-receive hook declined" in refused["data"]["error"]
    listed = subprocess.run(["git", "branch", "--list", "harness/*"], cwd=remote.bare, capture_output=True, text=True, check=True)
    assert listed.stdout.strip() == ""
    assert executor.context.settings.remote is not None
    executor.context.settings.remote.access = remote.access(token="revoked-token")
    unauthorised = publish(executor, "f" * 32)
    assert (unauthorised["status"], unauthorised["effect"]) == ("ok", "none"), unauthorised
    assert "refused the server's credentials" in unauthorised["data"]["error"] and "revoked-token" not in str(unauthorised)


# -- run creation and the loop ---------------------------------------------------


def test_it_accepts_a_remote_source_only_as_git_with_exactly_one_location() -> None:
    assert WorkspaceSource(kind="git", url="https://git.example.com/a.git", ref="main").path is None
    for bad in (
        {"kind": "git"},
        {"kind": "git", "path": "examples/orders", "url": "https://git.example.com/a.git"},
        {"kind": "archive", "url": "https://git.example.com/a.tgz"},
    ):
        with pytest.raises(ValueError, match="exactly one of path|its kind must be 'git'"):
            WorkspaceSource.model_validate(bad)


def test_it_creates_no_run_for_a_refused_or_malformed_remote_and_records_the_base_of_an_allowed_one(
    operator: User, remote: Remote, settings: Settings, tmp_path: Path
) -> None:
    from runs.models import Run
    from runs.runtime import advance, workspace_for
    from tests.test_api import SCRIPT, SMALL_CONTRACT, client_for

    settings.GIT_ALLOWED_REMOTES = [f"file://{remote.root}/*"]
    settings.WORKSPACE_ROOT = tmp_path / "workspaces"
    client = client_for(operator)
    for url, says in (
        ("https://evil.example.com/shop.git", "is not an allowed remote"),
        ("https://token@evil.example.com/shop.git", "credentials do not belong in the URL"),
    ):
        contract = {**SMALL_CONTRACT, "workspace": {"kind": "git", "url": url}}
        response = client.post("/api/runs/", {"contract": contract, "proposer": SCRIPT}, format="json")
        assert response.status_code == 400
        assert says in response.json()["contract.workspace.url"][0], response.json()
    assert Run.objects.count() == 0
    # Creating a run (the unprivileged web side) does not contact the remote: the
    # worker that first drives the run clones it, and stops the run naming a missing ref.
    missing = {**SMALL_CONTRACT, "workspace": {"kind": "git", "url": f"file://{remote.bare}", "ref": "nope"}}
    response = client.post("/api/runs/", {"contract": missing, "proposer": SCRIPT}, format="json")
    assert response.status_code == 201, response.json()
    assert advance(response.json()["id"]) == "workspace_error"
    assert "has no branch or tag 'nope'" in Run.objects.get(pk=response.json()["id"]).stop_message
    good = {**SMALL_CONTRACT, "workspace": {"kind": "git", "url": f"file://{remote.bare}", "ref": "v1"}}
    response = client.post("/api/runs/", {"contract": good, "proposer": SCRIPT}, format="json")
    assert response.status_code == 201, response.json()
    run = Run.objects.get(pk=response.json()["id"])
    assert workspace_for(run).source["commit"] == remote.commits["first"]


def test_it_shows_a_refused_remote_on_the_new_run_form(operator: User, settings: Settings) -> None:
    from django.test import Client

    from tests.test_api import SMALL_CONTRACT

    settings.GIT_ALLOWED_REMOTES = ["https://git.example.com/*"]
    client = Client()
    client.force_login(operator)
    contract = {**SMALL_CONTRACT, "workspace": {"kind": "git", "url": "https://evil.example.com/shop.git"}}
    page = client.post(
        "/runs/new/", {"contract": json.dumps(contract), "proposer_kind": "scripted", "proposer_options": json.dumps({"script": []})}
    )
    assert page.status_code == 400
    body = page.content.decode()
    assert "workspace.url: https://evil.example.com/shop.git is not an allowed remote" in body, body[body.find("error") :][:600]


def test_it_stops_the_run_when_the_lookup_finds_another_commit_on_the_branch() -> None:
    from core.faults import Fault
    from core.ports import Reconciliation
    from core.scenarios import FIXED, build_rig, call

    script = [
        call("write_file", path="src/calc.py", content=FIXED),
        call("run_check", check_id="tests"),
        call("publish", message="fix"),
        call("read_file", path="src/calc.py"),
    ]
    rig = build_rig(script, faults=[Fault("publish", "timeout", 1)])
    detail = "branch harness/t-1 on https://git.example.com/a.git is at 0123abcd, which is not this run's commit"
    rig.executor.reconcile = lambda effect: Reconciliation(True, False, True, detail, conflict=True)  # type: ignore[method-assign]  # this instance's only
    rig.harness.run()
    assert rig.state.outcome == "effect_conflict"
    assert "not this run's commit" in (rig.state.stop_message or "")
    assert [(p.tool, p.resolved) for p in rig.state.pending_effects] == [("publish", False)]


def test_it_names_the_runs_branch_on_the_commit_it_was_cloned_at(operator: User, remote: Remote, tmp_path: Path) -> None:
    from runs.runtime import remote_target
    from tests.test_approvals import waiting_run

    _world, run, _request = waiting_run(operator)
    workspace = clone_run(tmp_path, f"file://{remote.bare}", "main", remote.access())
    target = remote_target(run, workspace)
    assert target is not None
    assert (target.branch, target.base, target.url) == (
        f"harness/calc-fix-{str(run.pk)[:8]}",
        remote.commits["main"],
        f"file://{remote.bare}",
    )


def test_it_keeps_the_git_directory_for_pushing_when_the_checkout_differs_from_the_commit(remote: Remote, tmp_path: Path, db: None) -> None:
    from runs.persistence.artifacts import ArtifactStorage
    from runs.persistence.outbox import DatabaseOutbox

    # An eol attribute makes the checkout's bytes differ from the commit's blobs: the
    # commit's objects cannot be the pristine side, but pushes still need the git dir.
    work = remote.root / "eol-work"
    sh("clone", "--quiet", str(remote.bare), str(work))
    (work / ".gitattributes").write_text("*.txt text eol=crlf\n")
    (work / "notes.txt").write_text("one\n")
    sh("add", "-A", cwd=work)
    sh("commit", "--quiet", "-m", "Notes", cwd=work)
    sh("push", "--quiet", "origin", "HEAD:refs/heads/eol", cwd=work)
    url = f"file://{remote.bare}"
    workspace = clone_run(tmp_path, url, "eol", remote.access())
    assert (workspace.dir / "notes.txt").read_bytes() == b"one\r\n"
    assert not workspace.pristine_git.exists() and workspace.remote_git == workspace.root / "remote.git"
    assert (workspace.pristine / "notes.txt").read_bytes() == b"one\r\n"
    workspace.write_file("total.py", FIX)
    target = RemoteTarget(
        url=url, base=str(workspace.source["commit"]), branch="harness/eol-1", git_dir=workspace.remote_git, access=remote.access()
    )
    executor = SandboxExecutor(
        "run-eol", workspace, None, ArtifactStorage(), DatabaseOutbox(), ToolSettings(write_paths=("*",), remote=target)
    )
    published = publish(executor, "b" * 32)
    assert (published["status"], published["effect"]) == ("ok", "applied"), published
    commit = published["data"]["commit"]
    assert in_bare(remote, "diff", "--name-only", str(workspace.source["commit"]), commit) == "total.py"


# -- clone retries ---------------------------------------------------------------


def retrying(remote: Remote, attempts: int = 4, token: str = TOKEN) -> RemoteAccess:
    return RemoteAccess(
        **{**vars(remote.access(token)), "clone_attempts": attempts, "clone_backoff_seconds": 0.05, "clone_backoff_max_seconds": 0.1}
    )


def test_it_retries_a_clone_that_fails_for_a_passing_network_reason(remote: Remote, tmp_path: Path) -> None:
    url = remote.proxy.url("shop.git")
    for failure in (503, "reset"):
        remote.proxy.seen.clear()
        remote.proxy.fail_requests, remote.proxy.fail_with = 2, failure
        workspace = clone_run(tmp_path, url, "main", retrying(remote))
        assert workspace.source["commit"] == remote.commits["main"]
        # Two failed attempts, then the third clone's own requests.
        assert remote.proxy.seen[:3] == ["/shop.git/info/refs?service=git-upload-pack"] * 3, (failure, remote.proxy.seen)
    remote.proxy.fail_requests, remote.proxy.fail_with = 10, 503
    with pytest.raises(RemoteError) as gave_up:
        clone_run(tmp_path, url, "main", retrying(remote, attempts=3))
    assert "after 3 attempts" in gave_up.value.message and "503" in gave_up.value.message
    assert remote.proxy.fail_requests == 7, "three attempts, no more"


def test_it_reads_a_status_in_git_words_not_in_the_url_git_quotes() -> None:
    # A loopback server's port may spell 403; the 503 it answered is still a 503.
    unavailable = "fatal: unable to access 'http://127.0.0.1:40312/shop.git/': The requested URL returned error: 503"
    forbidden = "fatal: unable to access 'http://127.0.0.1:5000/shop.git/': The requested URL returned error: 403"
    assert passing_failure(GitRun(128, "", unavailable))
    assert not passing_failure(GitRun(128, "", forbidden))


def test_it_does_not_retry_a_refused_credential_or_an_unknown_ref(remote: Remote, tmp_path: Path) -> None:
    url = remote.proxy.url("shop.git")
    for ref, token, cause in (("main", "wrong-token", "auth"), ("no-such-branch", TOKEN, "unknown_ref")):
        remote.proxy.seen.clear()
        with pytest.raises(RemoteError) as once:
            clone_run(tmp_path, url, ref, retrying(remote, attempts=1, token=token))
        single = len(remote.proxy.seen)
        remote.proxy.seen.clear()
        with pytest.raises(RemoteError) as retried:
            clone_run(tmp_path, url, ref, retrying(remote, attempts=4, token=token))
        assert once.value.cause == retried.value.cause == cause
        assert len(remote.proxy.seen) == single, f"{cause}: not tried again"
        assert "attempts" not in retried.value.message


def test_it_starts_a_run_from_a_repository_url_and_ref_on_the_new_run_form(operator: User, remote: Remote, settings: Settings) -> None:
    from django.test import Client

    from runs.models import Run

    settings.GIT_ALLOWED_REMOTES = [f"file://{remote.root}/*"]
    client = Client()
    client.force_login(operator)
    form = {"template": "demo", "contract": "", "proposer_kind": "scripted", "proposer_options": ""}
    page = client.post("/runs/new/", {**form, "repository_url": f"file://{remote.bare}", "repository_ref": "v1"})
    assert page.status_code == 302, page.content.decode()[:2000]
    run = Run.objects.get()
    assert run.contract["workspace"] == {"kind": "git", "url": f"file://{remote.bare}", "ref": "v1", "path": None}
    assert page["Location"] == f"/runs/{run.pk}/"
    refused = client.post("/runs/new/", {**form, "repository_url": "https://evil.example.com/shop.git", "repository_ref": "main"})
    assert refused.status_code == 400 and Run.objects.count() == 1
    body = refused.content.decode()
    assert "Repository URL</span> · workspace.url: https://evil.example.com/shop.git is not an allowed remote" in body
    bad_ref = client.post("/runs/new/", {**form, "repository_url": f"file://{remote.bare}", "repository_ref": "a..b"})
    assert "Branch, tag or commit</span> · workspace.ref: &#x27;a..b&#x27; is not a valid git ref" in bad_ref.content.decode()
