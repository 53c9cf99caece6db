"""open_change_request: a pull request (GitHub, through PyGithub) or a merge request
(GitLab, through python-gitlab) from the branch publish pushed, against loopback
servers that speak the forges' REST wire format (tests/fake_forges.py), with the
run's branch on a real git server (tests/gitserver.py)."""

from __future__ import annotations

import dataclasses
import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from pytest_django import Settings

from core.contract import WorkspaceSource
from core.policy import authorize, check_policy
from core.state import PendingEffect
from sandbox.executor import SandboxExecutor
from sandbox.tools.context import ToolSettings
from sandbox.vcs.forges import ChangeRequests, ForgeAccess
from sandbox.vcs.remote import RemoteAccess, RemoteTarget
from sandbox.workspace.preparation import prepare_workspace
from tests.fake_forges import FORGE_TOKEN, FakeForge
from tests.fixtures_sandbox import ROOT, fixed_call, shown
from tests.gitserver import TOKEN, USER, GitHttpServer, make_bare_repository, serving

PROJECT = "acme/shop"
BRANCH = "harness/fix-totals-1a2b3c4d"
FIX = (
    "def total(prices):\n    if any(p < 0 for p in prices):\n        raise ValueError('negative price')\n    return round(sum(prices), 2)\n"
)
TITLE = "Refuse negative prices"
BODY = "They made refunds.\n\n<script>alert(1)</script> & more"


@pytest.fixture
def git_server(tmp_path: Path) -> Iterator[GitHttpServer]:
    root = tmp_path / "server"
    root.mkdir()
    make_bare_repository(root, f"{PROJECT}.git")
    server = GitHttpServer(root)
    with serving(server):
        yield server


def git_access(server: GitHttpServer) -> RemoteAccess:
    return RemoteAccess(allowed=(f"http://127.0.0.1:{server.port}/acme/",), token=TOKEN, token_user=USER, timeout_seconds=30)


def forge_access(forge: FakeForge, token: str = FORGE_TOKEN, timeout: float = 10.0) -> ForgeAccess:
    return ForgeAccess(forge.kind, forge.api_url, forge.web_url, token=token, timeout_seconds=timeout)


def run_for(tmp_path: Path, server: GitHttpServer, forge: FakeForge | None, target: str | None = "main") -> SandboxExecutor:
    """A run cloned from the git server with total.py fixed, its forge the fake one."""
    from runs.persistence.artifacts import ArtifactStorage
    from runs.persistence.outbox import DatabaseOutbox

    url = server.url(f"{PROJECT}.git")
    source = WorkspaceSource(kind="git", url=url, ref="main")
    workspace = prepare_workspace(tmp_path / f"run-{uuid.uuid4().hex[:6]}", source, ROOT, (ROOT,), git_access(server))
    workspace.write_file("total.py", FIX)
    remote = RemoteTarget(
        url=url, base=str(workspace.source["commit"]), branch=BRANCH, git_dir=workspace.remote_git, access=git_access(server)
    )
    requests = None
    if forge is not None:
        access = forge_access(forge)
        requests = ChangeRequests(access, access.project_of(url), BRANCH, target)
    return SandboxExecutor(
        "run-1a2b3c4d",
        workspace,
        None,
        ArtifactStorage(),
        DatabaseOutbox(),
        ToolSettings(write_paths=("*",), remote=remote, forge=requests),
    )


def use_forge(executor: SandboxExecutor, requests: ChangeRequests) -> None:
    """The run's forge from now on (a shorter timeout, another token), its tool settings otherwise the same."""
    executor.context.settings = dataclasses.replace(executor.context.settings, forge=requests)


def execute(executor: SandboxExecutor, tool: str, args: dict[str, Any], key: str) -> dict[str, Any]:
    receipt = executor.execute(fixed_call(executor, tool, args, key))
    assert isinstance(receipt, dict)
    return receipt


def publish(executor: SandboxExecutor) -> None:
    pushed = execute(executor, "publish", {"message": TITLE}, "a" * 32)
    assert (pushed["status"], pushed["effect"]) == ("ok", "applied"), pushed


def open_request(executor: SandboxExecutor, key: str = "c" * 32) -> dict[str, Any]:
    return execute(executor, "open_change_request", {"title": TITLE, "body": BODY}, key)


def pending(key: str = "c" * 32) -> PendingEffect:
    return PendingEffect(
        call_id="c1", tool="open_change_request", args={}, kind="external", idempotency_key=key, reason="lost", recorded_at=0
    )


def assert_no_token(*things: object) -> None:
    for thing in things:
        text = json.dumps(thing, default=str)
        assert FORGE_TOKEN not in text and TOKEN not in text


# -- GitHub ------------------------------------------------------------------------


def test_it_opens_one_pull_request_from_the_pushed_branch(git_server: GitHttpServer, tmp_path: Path, db: None) -> None:
    with FakeForge("github", PROJECT) as forge:
        executor = run_for(tmp_path, git_server, forge)
        publish(executor)
        opened = open_request(executor)
        assert (opened["status"], opened["effect"]) == ("ok", "applied"), opened
        request = opened["data"]["change_request"]
        assert request == {"number": 1, "url": f"{forge.web_url}/{PROJECT}/pull/1", "source": BRANCH, "target": "main", "title": TITLE}
        assert opened["data"]["duplicate"] is False and opened["data"]["branch"] == BRANCH
        # Exactly what PyGithub sent: the repository, the open requests from the
        # branch (none), then one create with the title, the body, head and base.
        assert [(r.method, r.path) for r in forge.requests] == [
            ("GET", f"/api/v3/repos/{PROJECT}"),
            ("GET", f"/api/v3/repos/{PROJECT}/pulls"),
            ("POST", f"/api/v3/repos/{PROJECT}/pulls"),
        ]
        listed = forge.requests[1].query
        assert (listed["state"], listed["head"]) == ("open", f"acme:{BRANCH}")
        assert forge.posts()[0].body == {"base": "main", "head": BRANCH, "title": TITLE, "body": BODY}
        assert {r.headers["authorization"] for r in forge.requests} == {f"token {FORGE_TOKEN}"}
        # The same operation again (another key: the forge, not the run's ledger,
        # is what finds it): reported, not created.
        again = open_request(executor, key="d" * 32)
        assert (again["status"], again["effect"], again["data"]["duplicate"]) == ("ok", "none", True), again
        assert again["data"]["change_request"]["url"] == request["url"]
        assert len(forge.posts()) == 1 and len(forge.opened) == 1
        assert_no_token(opened, again)


def test_it_refuses_a_change_request_before_the_branch_is_pushed(git_server: GitHttpServer, tmp_path: Path, db: None) -> None:
    with FakeForge("github", PROJECT) as forge:
        executor = run_for(tmp_path, git_server, forge)
        refused = open_request(executor)
        assert (refused["status"], refused["effect"]) == ("ok", "none")
        assert f"branch {BRANCH} is not on" in refused["data"]["error"] and "publish the change first" in refused["data"]["error"]
        assert forge.requests == [], "the forge is not asked before the branch exists"
        no_forge = run_for(tmp_path, git_server, None)
        publish(no_forge)
        said = open_request(no_forge)["data"]["error"]
        assert "no forge is configured" in said and "HARNESS_FORGE" in said


def test_it_reconciles_a_lost_create_answer_by_the_open_requests_without_a_duplicate(
    git_server: GitHttpServer, tmp_path: Path, db: None
) -> None:
    with FakeForge("github", PROJECT) as forge:
        executor = run_for(tmp_path, git_server, forge)
        publish(executor)
        forge.drop_create_answer = True
        lost = open_request(executor)
        assert (lost["status"], lost["effect"]) == ("unknown", "unknown"), lost
        assert "outcome is unknown" in lost["data"]["error"] and "answer was lost" in lost["data"]["error"]
        assert len(forge.opened) == 1, "the forge did open it"
        forge.drop_create_answer = False
        found = executor.reconcile(pending())
        assert (found.resolved, found.applied, found.authoritative) == (True, True, True)
        assert f"{forge.web_url}/{PROJECT}/pull/1" in found.detail
        again = open_request(executor, key="e" * 32)
        assert (again["effect"], again["data"]["duplicate"]) == ("none", True)
        assert len(forge.posts()) == 1 and len(forge.opened) == 1, "never created twice"


def test_it_takes_a_create_cut_off_by_its_timeout_as_unknown_and_an_absent_request_as_not_opened(
    git_server: GitHttpServer, tmp_path: Path, db: None
) -> None:
    with FakeForge("github", PROJECT) as forge:
        executor = run_for(tmp_path, git_server, forge)
        publish(executor)
        absent = executor.reconcile(pending())
        assert (absent.resolved, absent.applied) == (True, False) and "it was not opened" in absent.detail
        use_forge(executor, ChangeRequests(forge_access(forge, timeout=2.0), PROJECT, BRANCH, "main"))
        forge.drop_create_answer, forge.hold_seconds = True, 6.0
        cut = open_request(executor)
        assert (cut["status"], cut["effect"]) == ("unknown", "unknown"), cut
        forge.drop_create_answer = False
        assert executor.reconcile(pending()).applied is True and len(forge.opened) == 1


def test_it_reports_a_refused_create_and_a_refused_token_as_failed_effects(git_server: GitHttpServer, tmp_path: Path, db: None) -> None:
    with FakeForge("github", PROJECT) as forge:
        executor = run_for(tmp_path, git_server, forge, target="release")
        publish(executor)
        error = {"resource": "PullRequest", "field": "base", "code": "invalid"}
        forge.refuse = (422, {"message": "Validation Failed", "errors": [error]})
        refused = open_request(executor)
        assert (refused["status"], refused["effect"], refused["data"]["refused"]) == ("ok", "none", True), refused
        assert "the forge refused the request (422): Validation Failed" in refused["data"]["error"]
        assert forge.posts()[0].body["base"] == "release"
        forge.refuse = None
        assert executor.context.settings.forge is not None
        use_forge(executor, ChangeRequests(forge_access(forge, token="revoked-forge-token"), PROJECT, BRANCH, "main"))
        unauthorised = open_request(executor)
        assert (unauthorised["status"], unauthorised["effect"]) == ("ok", "none")
        assert "refused the server's token (401)" in unauthorised["data"]["error"]
        assert "revoked-forge-token" not in json.dumps(unauthorised)
        assert forge.opened == []


def test_it_retries_a_forge_that_cannot_be_reached(git_server: GitHttpServer, tmp_path: Path, db: None) -> None:
    with FakeForge("github", PROJECT) as forge:
        executor = run_for(tmp_path, git_server, forge)
    # The server is gone: nothing reached a forge, so the call is retried, not pending.
    publish(executor)
    unreachable = open_request(executor)
    assert (unreachable["status"], unreachable["effect"]) == ("transient", "none"), unreachable
    assert "could not be reached" in unreachable["data"]["error"]


def test_it_shows_the_reviewer_the_title_body_and_branches(git_server: GitHttpServer, tmp_path: Path, db: None) -> None:
    with FakeForge("github", PROJECT, default_branch="trunk") as forge:
        executor = run_for(tmp_path, git_server, forge, target=None)
        text = shown(executor, "open_change_request", {"title": TITLE, "body": BODY})
        assert text.startswith(f"# open a pull request on {forge.web_url}/{PROJECT}\n# from branch {BRANCH} into trunk\n")
        assert f"# title: {TITLE}\n# body:\n#   They made refunds.\n#\n#   <script>alert(1)</script> & more\n" in text
        assert_no_token(text)


# -- GitLab ------------------------------------------------------------------------


def test_it_opens_one_merge_request_on_gitlab_and_finds_a_lost_one(git_server: GitHttpServer, tmp_path: Path, db: None) -> None:
    with FakeForge("gitlab", PROJECT) as forge:
        executor = run_for(tmp_path, git_server, forge)
        publish(executor)
        forge.drop_create_answer = True
        lost = open_request(executor)
        assert (lost["status"], lost["effect"]) == ("unknown", "unknown"), lost
        forge.drop_create_answer = False
        found = executor.reconcile(pending())
        assert (found.resolved, found.applied) == (True, True) and f"{PROJECT}/-/merge_requests/1" in found.detail
        again = open_request(executor, key="d" * 32)
        assert (again["effect"], again["data"]["duplicate"]) == ("none", True), again
        assert again["data"]["change_request"] == {
            "number": 1,
            "url": f"{forge.web_url}/{PROJECT}/-/merge_requests/1",
            "source": BRANCH,
            "target": "main",
            "title": TITLE,
        }
        encoded = "/api/v4/projects/acme%2Fshop/merge_requests"
        assert [(r.method, r.path) for r in forge.requests] == [("GET", encoded), ("POST", encoded), ("GET", encoded), ("GET", encoded)]
        assert (forge.requests[0].query["source_branch"], forge.requests[0].query["state"]) == (BRANCH, "opened")
        assert forge.posts()[0].body == {"source_branch": BRANCH, "target_branch": "main", "title": TITLE, "description": BODY}
        assert {r.headers["private-token"] for r in forge.requests} == {FORGE_TOKEN}
        assert "authorization" not in forge.requests[0].headers
        assert len(forge.opened) == 1


def test_it_reports_gitlab_refusals_as_failed_effects(git_server: GitHttpServer, tmp_path: Path, db: None) -> None:
    with FakeForge("gitlab", PROJECT, default_branch="develop") as forge:
        executor = run_for(tmp_path, git_server, forge, target=None)
        publish(executor)
        forge.refuse = (422, {"message": ["Target branch develop does not exist"]})
        refused = open_request(executor)
        assert (refused["status"], refused["effect"]) == ("ok", "none") and "Target branch develop does not exist" in refused["data"][
            "error"
        ]
        # The default branch came from the project: GET /api/v4/projects/acme%2Fshop.
        assert ("GET", "/api/v4/projects/acme%2Fshop") in [(r.method, r.path) for r in forge.requests]
        assert forge.posts()[0].body["target_branch"] == "develop"
        forge.refuse = None
        assert executor.context.settings.forge is not None
        use_forge(executor, ChangeRequests(forge_access(forge, token="wrong"), PROJECT, BRANCH, None))
        unauthorised = open_request(executor)
        assert "refused the server's token (401)" in unauthorised["data"]["error"] and forge.opened == []


# -- policy, settings, links ---------------------------------------------------------


def test_it_asks_a_reviewer_for_a_change_request_by_default() -> None:
    policy = check_policy(json.loads((ROOT / "approvals" / "default_policy.json").read_text()))
    assert authorize(policy, "open_change_request", {"title": "t", "body": ""}).decision == "ask"


def test_it_links_only_to_the_configured_forge(git_server: GitHttpServer) -> None:
    access = ForgeAccess("github", "https://api.github.com", "https://github.com", token="t")
    assert access.project_of("https://github.com/acme/shop.git") == "acme/shop"
    assert access.web_link("https://github.com/acme/shop/pull/3") == "https://github.com/acme/shop/pull/3"
    for bad in ("https://github.com.evil.example/acme/shop/pull/3", "javascript:alert(1)", "https://github.com/a b", 42):
        assert access.web_link(bad) == ""
    assert access.branch_link("acme/shop", "harness/x-1") == "https://github.com/acme/shop/tree/harness/x-1"
    assert "token=" not in repr(access) and "'t'" not in repr(access)


# -- a whole run ---------------------------------------------------------------------


@pytest.mark.celery
@pytest.mark.docker
def test_it_opens_the_change_request_of_a_whole_run_after_two_approvals_and_links_it(
    transactional_db: None, operator: User, reviewer: User, settings: Settings, tmp_path: Path
) -> None:
    from django.test import Client

    from approvals.models import ApprovalRequest
    from runs.approval_flow.flow import grant
    from runs.models import Event
    from runs.runtime import create_run
    from tests.remote_runs import CHANGE_REQUEST, REPOSITORY, demo_script, parked, remote_rig
    from tests.runs_waiting import wait_for
    from tests.test_api import client_for

    with FakeForge("github", REPOSITORY) as forge:
        forge_env = {"FORGE": "github", "FORGE_API_URL": forge.api_url, "FORGE_WEB_URL": forge.web_url, "FORGE_TOKEN": FORGE_TOKEN}
        for name, value in forge_env.items():
            setattr(settings, name, value)
        with remote_rig(tmp_path / "remote", settings, **{f"HARNESS_{k}": v for k, v in forge_env.items()}) as rig:
            run = create_run(rig.contract("open_change_request"), demo_script(CHANGE_REQUEST), operator)
            run = parked(wait_for(run, ("waiting_approval",), timeout=120, log=rig.worker.log))
            grant(ApprovalRequest.objects.get(run=run, status="pending", tool="publish"), reviewer)
            deadline = time.monotonic() + 60
            while not ApprovalRequest.objects.filter(run=run, status="pending", tool="open_change_request").exists():
                assert time.monotonic() < deadline, rig.worker.log()[-3000:]
                time.sleep(0.1)
            asked = ApprovalRequest.objects.get(run=run, status="pending", tool="open_change_request")
            run = parked(run)
            branch = rig.branch_of(run)
            assert forge.posts() == [], "nothing is opened before the reviewer grants it"
            assert f"# from branch {branch} into main\n# title: Reject negative quantities\n" in asked.diff
            reviewer_client = Client()
            reviewer_client.force_login(reviewer)
            page = reviewer_client.get(f"/approvals/{asked.pk}/").content.decode()
            assert "&lt;b&gt;bold?&lt;/b&gt;" in page and "<b>bold?</b>" not in page and branch in page
            grant(asked, reviewer)
            run = wait_for(run, ("complete", "stopped"), timeout=120, log=rig.worker.log)
            assert run.outcome == "complete", run.stop_message
            assert len(forge.posts()) == 1 and forge.posts()[0].body == {
                "base": "main",
                "head": branch,
                "title": "Reject negative quantities",
                "body": "Found by the tests.\n<b>bold?</b>",
            }
            commit = rig.head(branch)
            assert commit is not None
        pull = f"{forge.web_url}/{REPOSITORY}/pull/1"
        viewer = Client()
        viewer.force_login(operator)
        html = viewer.get(f"/runs/{run.pk}/").content.decode()
        assert f'<a href="{pull}" rel="noreferrer">#1 Reject negative quantities</a>' in html
        assert f'<a href="{forge.web_url}/{REPOSITORY}/tree/{branch}" rel="noreferrer">{branch}</a> at <code>{commit[:12]}</code>' in html
        api = client_for(operator).get(f"/api/runs/{run.pk}/").json()
        assert [(p["kind"], p["href"]) for p in api["published"]] == [
            ("branch", f"{forge.web_url}/{REPOSITORY}/tree/{branch}"),
            ("change_request", pull),
        ]
        everything = json.dumps(list(Event.objects.filter(run=run).values_list("payload", flat=True))) + html + json.dumps(api)
        assert FORGE_TOKEN not in everything and TOKEN not in everything
        # Another forge's address in a receipt is shown as text, never linked.
        settings.FORGE_WEB_URL = "https://forge.example.com"
        assert f'href="{pull}"' not in viewer.get(f"/runs/{run.pk}/").content.decode()
