"""Nothing leaves unseen: one detector masks what Harness keeps and scans what a
publish ships. Planted secrets (an AWS key pair, a private key, a GitHub token, a
random value next to a credential name, a value from HARNESS_SECRET_VALUES) are
found by file and line; the policy refuses the publish (the model is told where)
or holds it for a reviewer who sees the findings above the diff; no value reaches
any database row, page, or file of the run's data; nothing reaches the real git
remote when refused; a push whose change holds a finding its approval did not show
is refused just before it. A base branch advanced on the remote while the request
waits is shown on the page, and under ``moved_base: stale`` the grant is refused."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.test import Client
from pytest_django import Settings

from approvals.checks import DecisionRefused
from approvals.models import ApprovalRequest, PolicyVersion
from approvals.policies import current_policy_row, default_policy_document
from common.redact import MASK, redact, redact_text
from common.secret_detector import CONFIGURED, MASKED, NAMED_VALUE, PRIVATE_KEY, hits
from common.secret_scan import SecretScanner
from core.contract import WorkspaceSource
from core.effects import PushEffect, parse_effect
from core.environment import Environment
from core.errors import FieldProblem, InputError
from core.policy import AllowedSecret, PublishChecks, check_policy
from core.publish_gate import problems, screen
from core.scenarios import call
from notifications.models import WebhookEndpoint
from runs.approval_flow.flow import grant
from runs.approval_flow.gate import DjangoApprovals
from runs.models import Event, Run
from runs.services import check_new_run, do_create_run, drive_run
from sandbox.container.sandbox_container import SandboxContainer
from sandbox.executor import SandboxExecutor
from sandbox.tools.context import ToolSettings
from sandbox.vcs.remote import RemoteAccess, RemoteTarget
from sandbox.workspace.patches import unified_diff
from sandbox.workspace.preparation import prepare_workspace
from tests.fixtures_sandbox import FIXED_AT, ROOT, SMOKE, fixed_call, make_call, start_container
from tests.gitserver import TOKEN, USER, GitHttpServer, make_bare_repository, serving, sh

AWS_ID = "AKIA" + "Q7RZ3MXK2VNB8PLD"
AWS_SECRET = "wJalrXUtnFEMI/K7MDENG/" + "bPxRfiCY9q3LmZ8xWp"
GITHUB = "ghp_" + "R8d2Kq7Lm4Nx9Pz3Vt6Wb1Yc5Hs0Jf2Ga7Qe"
NAMED = "q8Xz3LmN0pR7sT2vW9yB4cD6fG1hJ5kQ"
CONFIGURED_VALUE = "cfg-Vt92LmQx-smtp-relay"
KEY_BODY = "MIIEpAIBAAKCAQEAx3k9Plq2ZyBodyLineOfTheKey"
PLANTED = [AWS_ID, AWS_SECRET, GITHUB, NAMED, CONFIGURED_VALUE, KEY_BODY]

SETTINGS_FILE = (
    "[default]\n"
    f"aws_access_key_id = {AWS_ID}\n"
    f"aws_secret_access_key = {AWS_SECRET}\n"
    f"github_token = {GITHUB}\n"
    f'api_secret = "{NAMED}"\n'
    "region = eu-west-1\n"
    f"relay = smtp://mailer:{CONFIGURED_VALUE}@relay.internal\n"
)
KEY_FILE = f"-----BEGIN RSA PRIVATE KEY-----\n{KEY_BODY}\n-----END RSA PRIVATE KEY-----\n"
BRANCH = "harness/leaky-1a2b3c4d"


def leaks(text: str) -> list[str]:
    return [value for value in PLANTED if value in text]


# -- the detector ------------------------------------------------------------------


def test_it_finds_each_planted_kind_by_file_and_line_and_masks_exactly_that() -> None:
    scanner = SecretScanner(values=[CONFIGURED_VALUE], key=b"k")
    diff = unified_diff("config/app.ini", None, SETTINGS_FILE) + unified_diff("deploy/id_rsa", None, KEY_FILE)
    found = scanner.scan(diff, f"ship it\nwith {GITHUB}")
    assert [(f.path, f.line, f.kind) for f in found] == [
        ("(message)", 2, "GitHub token"),
        ("config/app.ini", 2, "AWS access key id"),
        ("config/app.ini", 3, NAMED_VALUE),
        ("config/app.ini", 4, "GitHub token"),
        ("config/app.ini", 5, NAMED_VALUE),
        ("config/app.ini", 7, CONFIGURED),
        ("deploy/id_rsa", 1, PRIVATE_KEY),
    ]
    assert found[0].fingerprint == found[3].fingerprint, "the same secret has one fingerprint wherever it is"
    assert all(len(f.fingerprint) == 16 and leaks(json.dumps(f.as_json())) == [] for f in found)
    # Another server's key gives other fingerprints: a fingerprint is no digest anyone can check candidates against.
    assert SecretScanner(values=[CONFIGURED_VALUE], key=b"other").scan(diff)[0].fingerprint != found[1].fingerprint
    # Masking uses the same rules: every planted value is gone, every other word stays.
    masked = redact_text(SETTINGS_FILE + KEY_FILE, [CONFIGURED_VALUE])
    assert leaks(masked) == [] and "region = eu-west-1" in masked and "smtp://mailer:" in masked
    assert masked.count("\n") == (SETTINGS_FILE + KEY_FILE).count("\n")
    # A quoted AWS secret key is detect-secrets' own shape; a JSON value under a credential name is masked whole.
    assert [h.kind for h in hits(f'aws_secret_access_key = "{AWS_SECRET}"')] == ["AWS secret access key"]
    assert redact({"client_secret": NAMED, "approval_key": "0123456789abcdef0123456789abcdef"}) == {
        "client_secret": MASK,
        "approval_key": "0123456789abcdef0123456789abcdef",
    }


def test_it_leaves_harnesss_own_hex_ids_and_ordinary_code_alone() -> None:
    for line in (
        "lease_token = 0123456789abcdef0123456789abcdef",
        "token_file = settings.GIT_TOKEN_FILE",
        'password = os.environ["DB_PASSWORD"]',
        "max_tokens = 100000",
        "revision: 3f2a9c0d1e4b5a6978877665544332211aabbccd",
    ):
        assert hits(line) == [], line
        assert redact_text(line, []) == line


def test_it_reads_only_added_lines_and_counts_lines_by_the_hunks() -> None:
    old = "a\nb\nc\n" + f"old = {GITHUB}\n"
    new = "a\n++ looks like a header\nc\nnew = 1\n" + f"token = {NAMED}\n"
    found = SecretScanner().scan(unified_diff("f.txt", old, new))
    assert [(f.path, f.line, f.kind) for f in found] == [("f.txt", 5, NAMED_VALUE)], "a removed secret leaves with the change"
    masked_line = f"key = {MASK}\n"
    assert [(f.line, f.kind) for f in SecretScanner().scan(unified_diff("g.txt", None, "x\n" + masked_line))] == [(2, MASKED)]


# -- the gate (plain Python) ---------------------------------------------------------


def test_it_decides_from_the_findings_as_the_policy_says() -> None:
    found = [{"path": "a.ini", "line": 3, "kind": NAMED_VALUE, "fingerprint": "0123456789abcdef"}]
    assert screen(PublishChecks(), [], True).decision == "clear"
    refused = screen(PublishChecks(), found, True)
    assert refused.decision == "refuse"
    told = problems(refused)
    assert told[0] == FieldProblem("a.ini:3", f"looks like a secret ({NAMED_VALUE}); take it out of the change")
    assert screen(PublishChecks(secrets="ask"), found, True).decision == "ask"
    # A rule that asks nobody has nobody to show the findings to.
    assert screen(PublishChecks(secrets="ask"), found, False).decision == "refuse"
    allowed = PublishChecks(allowed_secrets=[AllowedSecret(path="a.ini", fingerprint="0123456789abcdef", reason="fixture")])
    cleared = screen(allowed, found, True)
    assert (cleared.decision, cleared.allowed) == ("clear", found)
    assert (
        screen(PublishChecks(allowed_secrets=[AllowedSecret(path="b.ini", fingerprint="0123456789abcdef")]), found, True).decision
        == "refuse"
    )


# -- a real remote ---------------------------------------------------------------------


@pytest.fixture
def shop(tmp_path: Path) -> Iterator[tuple[GitHttpServer, Path, dict[str, str]]]:
    root = tmp_path / "server"
    root.mkdir()
    commits = make_bare_repository(root)
    server = GitHttpServer(root)
    with serving(server):
        yield server, root, commits


def access_to(server: GitHttpServer) -> RemoteAccess:
    return RemoteAccess(allowed=(server.url("shop.git"),), token=TOKEN, token_user=USER, author_name="Harness Bot", timeout_seconds=30)


def executor_for(
    server: GitHttpServer, workdir: Path, run_id: str, containers: list[SandboxContainer] | None = None, **extra: Any
) -> SandboxExecutor:
    """A run's executor on a clone of the shop's main, pushing to BRANCH; with a
    sandbox container (added to ``containers``) when one is given."""
    from runs.persistence.artifacts import ArtifactStorage
    from runs.persistence.outbox import DatabaseOutbox

    url = server.url("shop.git")
    workspace = prepare_workspace(workdir, WorkspaceSource(kind="git", url=url, ref="main"), ROOT, (ROOT,), access_to(server))
    target = RemoteTarget(
        url=url, base=str(workspace.source["commit"]), branch=BRANCH, git_dir=workspace.remote_git, access=access_to(server)
    )
    container = None
    if containers is not None:
        container = start_container(run_id, workspace)
        containers.append(container)
    return SandboxExecutor(
        run_id,
        workspace,
        container,
        ArtifactStorage(run_id),
        DatabaseOutbox(),
        ToolSettings(write_paths=("*",), remote=target, base_branch="main", **extra),
    )


def advance_main(root: Path) -> str:
    """Someone else's commit on main, touching a file the run's change does not."""
    work = root / "shop.git-work"
    sh("checkout", "--quiet", "main", cwd=work)
    (work / "README.md").write_text("# Shop\n\nNow with a readme.\n")
    sh("commit", "--quiet", "-am", "Readme", cwd=work)
    sh("push", "--quiet", str(root / "shop.git"), "main", cwd=work)
    return sh("rev-parse", "HEAD", cwd=work)


def test_it_refuses_just_before_the_push_a_finding_the_approval_did_not_show(
    shop: tuple[GitHttpServer, Path, dict[str, str]], tmp_path: Path, db: None
) -> None:
    server, root, _ = shop
    executor = executor_for(server, tmp_path / "ws", "run-raw", scanner=SecretScanner(values=[CONFIGURED_VALUE]))
    # Written as a write tool writes (a value configured on the server after it was
    # proposed, say): the raw secret is in the workspace, where masking cannot reach.
    executor.workspace.write_file("config/app.ini", SETTINGS_FILE)
    plan = executor.plan("publish", {"message": "Add settings"}, "b" * 32, FIXED_AT)
    assert plan is not None
    assert {(f["path"], f["line"]) for f in plan.findings} >= {("config/app.ini", 2), ("config/app.ini", 7)}
    fixed = parse_effect(plan.effect)
    assert isinstance(fixed, PushEffect) and len(fixed.secrets) == len(plan.findings)
    # An effect fixed without the findings (a reviewer never saw them): nothing is pushed.
    unseen = fixed.model_copy(update={"secrets": []}).model_dump()
    receipt = executor.execute(dataclasses.replace(make_call("publish", {"message": "Add settings"}, key="b" * 32), effect=unseen))
    assert isinstance(receipt, dict)
    assert "holds secrets its approval did not show: config/app.ini:2 (AWS access key id)" in receipt["data"]["error"]
    assert server.pushes == [] and sh("for-each-ref", f"refs/heads/{BRANCH}", cwd=root / "shop.git") == ""
    # The effect as fixed, the findings on it (what a reviewer granted having seen them): pushed.
    shown = executor.execute(dataclasses.replace(make_call("publish", {"message": "Add settings"}, key="b" * 32), effect=plan.effect))
    assert isinstance(shown, dict) and shown["effect"] == "applied", shown
    assert sh("rev-parse", f"refs/heads/{BRANCH}", cwd=root / "shop.git") == fixed.commit


def test_it_refuses_the_push_on_a_moved_base_when_the_policy_says_stale(
    shop: tuple[GitHttpServer, Path, dict[str, str]], tmp_path: Path, db: None
) -> None:
    server, root, commits = shop
    executor = executor_for(server, tmp_path / "ws", "run-moved", moved_base="stale")
    executor.workspace.write_file("total.py", "def total(prices):\n    return round(sum(prices), 2)  # checked\n")
    key = "c" * 32
    advance_main(root)
    receipt = executor.execute(fixed_call(executor, "publish", {"message": "Check totals"}, key))
    assert isinstance(receipt, dict)
    assert receipt["data"]["error"].startswith("nothing was published: the base branch main moved 1 commit since this run started")
    assert "still applies cleanly" in receipt["data"]["error"] and server.pushes == []
    shown = executor_for(server, tmp_path / "ws2", "run-shown")
    shown.workspace.write_file("total.py", "def total(prices):\n    return round(sum(prices), 2)  # checked\n")
    pushed = shown.execute(fixed_call(shown, "publish", {"message": "Check totals"}, key))
    assert isinstance(pushed, dict) and pushed["effect"] == "applied", pushed
    assert "base_moved" not in pushed["data"], "cloned after the move: its base is the new head"
    assert commits["main"] != sh("rev-parse", "main", cwd=root / "shop.git")


# -- whole runs ---------------------------------------------------------------------------


def use_policy(secrets: str, moved_base: str = "show") -> None:
    """The default project's policy with publish asked without evidence, and the
    publish checks as given."""
    row = current_policy_row()
    document = {key: value for key, value in row.document.items() if key != "version"}
    document["rules"] = [{**r, "requires_evidence": False} if r["tool"] == "publish" else r for r in document["rules"]]
    document["publish_checks"] = {"secrets": secrets, "moved_base": moved_base}
    document["checks"] = [*document["checks"], SMOKE.model_dump()]
    PolicyVersion.objects.create(version=row.version + 1, document={**document, "version": row.version + 1}, note="a secrets test")


@pytest.fixture
def containers() -> Iterator[list[SandboxContainer]]:
    started: list[SandboxContainer] = []
    yield started
    for container in started:
        container.remove()


def leaky_run(
    server: GitHttpServer, tmp_path: Path, operator: User, settings: Settings, containers: list[SandboxContainer]
) -> tuple[Run, SandboxExecutor]:
    """A run that writes every planted secret into its change, passes its check (a
    real container) and publishes, with a secret in the message too; a webhook
    endpoint gets the run's notices (their bodies are rows too)."""
    WebhookEndpoint.objects.create(name="hook", url="https://93.184.215.14/hook", event_kinds=["approval_requested", "run_stopped"])
    settings.GIT_ALLOWED_REMOTES = [server.url("shop.git")]
    script = [
        call("write_file", path="config/app.ini", content=SETTINGS_FILE),
        call("write_file", path="deploy/id_rsa", content=KEY_FILE),
        call("run_check", check_id="smoke"),
        call("publish", message=f"Add the settings\n\nrelay password {CONFIGURED_VALUE}"),
    ]
    contract = {
        "task_id": "leaky",
        "objective": "add the settings",
        "acceptance_criteria": ["settings exist"],
        "workspace": {"kind": "git", "url": server.url("shop.git"), "ref": "main"},
        "allowed_write_paths": ["config/*", "deploy/*"],
        "allowed_tools": ["write_file", "run_check", "publish"],
        "verification_targets": ["smoke"],
        "limits": {
            "max_proposals": 10,
            "max_tool_calls": 10,
            "max_attempts": 2,
            "wall_time_seconds": 600,
            "max_output_bytes_per_call": 65536,
        },
    }
    holder: dict[str, SandboxExecutor] = {}

    def prepared(run: Run) -> str:
        scanner = SecretScanner(values=[CONFIGURED_VALUE], key=b"server")
        executor = holder["executor"] = executor_for(server, tmp_path / "ws", str(run.pk), containers, scanner=scanner)
        return executor.revision()

    run = do_create_run(check_new_run(contract, {"kind": "scripted", "script": script}), operator, prepared)
    return run, holder["executor"]


def database_leaks() -> list[str]:
    found = []
    with connection.cursor() as cursor:
        for table in connection.introspection.table_names():
            cursor.execute(f"SELECT * FROM {connection.ops.quote_name(table)}")
            found += [f"{table}: {value}" for row in cursor.fetchall() for value in leaks(" ".join(map(str, row)))]
    return found


def file_leaks(root: Path) -> list[str]:
    return [f"{path}: {value}" for path in root.rglob("*") if path.is_file() for value in PLANTED if value.encode() in path.read_bytes()]


@pytest.mark.docker
def test_it_refuses_a_publish_holding_secrets_telling_the_model_where_and_keeps_them_nowhere(
    shop: tuple[GitHttpServer, Path, dict[str, str]],
    tmp_path: Path,
    operator: User,
    settings: Settings,
    client: Client,
    containers: list[SandboxContainer],
) -> None:
    server, root, _ = shop
    settings.HARNESS_SECRET_VALUES = [CONFIGURED_VALUE]
    use_policy("refuse")
    run, executor = leaky_run(server, tmp_path, operator, settings, containers)
    state = drive_run(run, Environment(executor, executor), DjangoApprovals(run))
    found = Event.objects.get(run=run, type="secrets_found")
    assert found.payload["decision"] == "refuse"
    where = {(f["path"], f["line"], f["kind"]) for f in found.payload["findings"]}
    # A script is stored (masked, as every column is) before it proposes anything, so these masks name no kind (a
    # model's proposals are masked in memory naming it: test_secret_scan_shapes); each such line is a finding, and
    # the key's marker too.
    assert {("config/app.ini", n, MASKED) for n in (2, 3, 4, 5, 7)} <= where and ("deploy/id_rsa", 1, PRIVATE_KEY) in where
    assert ("(message)", 3, MASKED) in where
    refused = Event.objects.filter(run=run, type="secrets_found").values_list("payload", flat=True)[0]
    assert {"field": "config/app.ini:2", "message": f"looks like a secret ({MASKED}); take it out of the change"} in refused["problems"]
    assert not Event.objects.filter(run=run, type="call_admitted", payload__tool="publish").exists()
    assert state.stop_reason == "proposals_exhausted", "the refusal is feedback, not a stop: the run goes on to its next proposal"
    assert not ApprovalRequest.objects.filter(run=run).exists(), "refused before anyone is asked"
    assert server.pushes == [] and sh("for-each-ref", "refs/heads/harness/", cwd=root / "shop.git") == ""

    client.force_login(operator)
    for url in (f"/runs/{run.pk}/", f"/runs/{run.pk}/report.json", f"/runs/{run.pk}/events/?before=1000", f"/api/runs/{run.pk}/events/"):
        page = client.get(url)
        assert page.status_code == 200 and leaks(page.content.decode()) == [], url
    assert database_leaks() == []
    assert file_leaks(tmp_path) == []


@pytest.mark.docker
def test_it_holds_a_publish_holding_secrets_for_a_reviewer_who_sees_the_findings_and_a_moved_base(
    shop: tuple[GitHttpServer, Path, dict[str, str]],
    tmp_path: Path,
    operator: User,
    reviewer: User,
    settings: Settings,
    client: Client,
    containers: list[SandboxContainer],
) -> None:
    server, root, _ = shop
    settings.HARNESS_SECRET_VALUES = [CONFIGURED_VALUE]
    settings.GIT_ALLOWED_REMOTES = [server.url("shop.git")]
    settings.GIT_TOKEN, settings.GIT_TOKEN_USER = TOKEN, USER
    use_policy("ask", moved_base="stale")
    run, executor = leaky_run(server, tmp_path, operator, settings, containers)
    state = drive_run(run, Environment(executor, executor), DjangoApprovals(run))
    assert state.status == "waiting_approval", state.stop_message
    request = ApprovalRequest.objects.get(run=run)
    client.force_login(reviewer)
    html = client.get(f"/approvals/{request.pk}/").content.decode()
    assert 'id="secret-findings"' in html and html.index('id="secret-findings"') < html.index('id="diff-title"')
    assert (
        "<strong>config/app.ini</strong>, line 2: masked secret" in html and "<strong>deploy/id_rsa</strong>, line 1: private key" in html
    )
    assert 'id="base-moved"' not in html
    assert leaks(html) == []

    advance_main(root)
    html = client.get(f"/approvals/{request.pk}/").content.decode()
    assert "the base branch main moved 1 commit since this run started" in html
    assert "the change still applies cleanly to its head" in html
    with pytest.raises(DecisionRefused, match="stale: the base branch main moved 1 commit"):
        grant(request, reviewer)
    request.refresh_from_db()
    assert request.status == ApprovalRequest.Status.STALE and server.pushes == []
    assert database_leaks() == [] and file_leaks(tmp_path) == []


def test_it_keeps_every_publish_check_setting_in_the_versioned_policy() -> None:
    checks = PublishChecks.model_validate(
        {"secrets": "ask", "moved_base": "stale", "allowed_secrets": [{"path": "a", "fingerprint": "0123456789abcdef"}]}
    )
    assert checks.allowed_secrets[0].fingerprint == "0123456789abcdef"
    with pytest.raises(InputError, match="16 lowercase hex digits"):
        check_policy(
            {**default_policy_document(), "version": 1, "publish_checks": {"allowed_secrets": [{"path": "a", "fingerprint": "x"}]}}
        )
