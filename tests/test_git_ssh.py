"""A remote over ssh://, against a real OpenSSH server on loopback (tests/sshserver.py):
the worker clones and pushes with the server's key (HARNESS_GIT_SSH_KEY_FILE) and
checks the host against HARNESS_GIT_SSH_KNOWN_HOSTS; a key the server does not know
is refused with a clear error."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from pytest_django import Settings

from core.contract import WorkspaceSource
from sandbox.vcs.remote import RemoteAccess, RemoteError, RemoteTarget
from sandbox.workspace.preparation import prepare_workspace
from tests.fixtures_sandbox import FIXED_AT, ROOT
from tests.gitserver import make_bare_repository, sh
from tests.sshserver import SshServer, ssh_server

pytestmark = [pytest.mark.sshd]


@pytest.fixture
def sshd(tmp_path: Path) -> Iterator[SshServer]:
    with ssh_server(tmp_path / "sshd") as server:
        yield server


def access_for(server: SshServer, settings: Settings, key: Path) -> RemoteAccess:
    # Through the settings, as HARNESS_GIT_SSH_KEY_FILE and HARNESS_GIT_SSH_KNOWN_HOSTS set them.
    settings.GIT_ALLOWED_REMOTES = [f"ssh://{server.user}@127.0.0.1:{server.port}/*"]
    settings.GIT_SSH_KEY_FILE = str(key)
    settings.GIT_SSH_KNOWN_HOSTS = str(server.known_hosts)
    settings.GIT_CLONE_ATTEMPTS = 1
    return RemoteAccess.from_settings(settings)


def test_it_clones_and_pushes_over_ssh_with_the_servers_key(sshd: SshServer, settings: Settings, tmp_path: Path) -> None:
    commits = make_bare_repository(tmp_path / "repos")
    url = sshd.url(Path(commits["path"]))
    access = access_for(sshd, settings, sshd.key)
    workspace = prepare_workspace(tmp_path / "run", WorkspaceSource(kind="git", url=url, ref="main"), ROOT, (ROOT,), access)
    assert workspace.source["commit"] == commits["main"]
    workspace.write_file("total.py", "def total(prices):\n    return 0\n")
    target = RemoteTarget(url=url, base=commits["main"], branch="harness/ssh-1", git_dir=workspace.remote_git, access=access)
    patch = workspace.diff().text
    fixed = target.plan(patch, "Zero totals", [("Harness-Run", "run-ssh")], FIXED_AT)
    pushed = target.publish("a" * 32, fixed, patch)
    assert (pushed.outcome, pushed.duplicate, pushed.commit) == ("applied", False, fixed.commit), pushed
    assert sh("rev-parse", "refs/heads/harness/ssh-1", cwd=Path(commits["path"])) == pushed.commit
    assert target.lookup("a" * 32)[0] is True
    # The key stays on the worker: neither its path's content nor the key is in the run.
    secret = sshd.key.read_text().splitlines()[1]
    for path in workspace.root.rglob("*"):
        if path.is_file():
            assert secret.encode() not in path.read_bytes(), path
    assert str(sshd.key) not in json.dumps(workspace.source)


def test_it_refuses_a_key_the_server_does_not_know_and_an_unknown_host(sshd: SshServer, settings: Settings, tmp_path: Path) -> None:
    commits = make_bare_repository(tmp_path / "repos")
    url = sshd.url(Path(commits["path"]))
    wrong = access_for(sshd, settings, sshd.other_key)
    with pytest.raises(RemoteError) as refused:
        prepare_workspace(tmp_path / "run", WorkspaceSource(kind="git", url=url, ref="main"), ROOT, (ROOT,), wrong)
    assert refused.value.cause == "auth"
    assert "authentication failed with the server's credentials" in refused.value.message
    assert "Permission denied (publickey)" in refused.value.message
    # A host whose key is not the known one is not trusted, whatever the client key.
    (tmp_path / "other_hosts").write_text(sshd.known_hosts.read_text().replace("[127.0.0.1]", "[127.0.0.2]"))
    settings.GIT_SSH_KNOWN_HOSTS = str(tmp_path / "other_hosts")
    settings.GIT_SSH_KEY_FILE = str(sshd.key)
    unknown_host = RemoteAccess.from_settings(settings)
    with pytest.raises(RemoteError) as untrusted:
        prepare_workspace(tmp_path / "run2", WorkspaceSource(kind="git", url=url, ref="main"), ROOT, (ROOT,), unknown_host)
    assert "Host key verification failed" in untrusted.value.message
