"""A real OpenID provider for the sign-in tests: tests/oidc/provider.js (panva's
oidc-provider under Node, installed by scripts/setup.sh) on a loopback port it picks,
and the Harness web process configured to sign in through it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures_services import ROOT
from tests.fixtures_web import AsgiServer

PROVIDER_DIR = ROOT / "tests" / "oidc"
CLIENT_ID = "harness"
CLIENT_SECRET = "client-secret-9f2c1e"
ALLOWED_GROUP = "harness-users"


@dataclass
class Provider:
    issuer: str
    accounts_file: Path
    proc: subprocess.Popen[bytes]
    log_file: Path

    def set_account(self, login: str, groups: list[str], **claims: Any) -> None:
        """Add or change an account at the provider (read at its next sign-in)."""
        accounts = json.loads(self.accounts_file.read_text())
        accounts[login] = {"email": f"{login}@example.com", "preferred_username": login, "name": login.title(), "groups": groups, **claims}
        self.accounts_file.write_text(json.dumps(accounts))

    def log(self) -> str:
        return self.log_file.read_text(errors="replace")

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)


def start_provider(directory: Path, redirect_uri: str) -> Provider:
    if not (PROVIDER_DIR / "node_modules" / "oidc-provider").is_dir():
        raise RuntimeError("tests/oidc has no node_modules: run `make setup` (it runs npm ci there)")
    clients = [{"client_id": CLIENT_ID, "client_secret": CLIENT_SECRET, "redirect_uris": [redirect_uri]}]
    (directory / "clients.json").write_text(json.dumps(clients))
    accounts = directory / "accounts.json"
    accounts.write_text("{}")
    log_file = directory / "provider.log"
    with open(log_file, "wb") as log:
        proc = subprocess.Popen(
            ["node", "provider.js"],
            cwd=PROVIDER_DIR,
            env={**os.environ, "CLIENTS_FILE": str(directory / "clients.json"), "ACCOUNTS_FILE": str(accounts)},
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        for line in log_file.read_text(errors="replace").splitlines():
            if line.startswith("listening "):
                return Provider(f"http://127.0.0.1:{int(line.split()[1])}", accounts, proc, log_file)
        if proc.poll() is not None:
            break
        time.sleep(0.05)
    proc.kill()
    proc.wait(10)
    raise RuntimeError(f"the OpenID provider did not start: {log_file.read_text(errors='replace')[-2000:]}")


@dataclass
class OidcSite:
    server: AsgiServer
    provider: Provider


@pytest.fixture
def oidc_site_with(transactional_db: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[..., OidcSite]]:
    """Starts the provider and a Harness web process signing in through it, with
    extra settings of the test's; both are stopped after the test."""
    started: list[OidcSite] = []

    def start(**env: str) -> OidcSite:
        server = AsgiServer(tmp_path_factory.mktemp("daphne"))
        directory = tmp_path_factory.mktemp("oidc")
        provider = start_provider(directory, f"{server.url}/oidc/callback/")
        secret = directory / "client-secret"
        secret.write_text(CLIENT_SECRET + "\n")
        server.env = {
            "HARNESS_OIDC_ISSUER": provider.issuer,
            "HARNESS_OIDC_CLIENT_ID": CLIENT_ID,
            "HARNESS_OIDC_CLIENT_SECRET_FILE": str(secret),
            "HARNESS_OIDC_SCOPES": "openid,email,profile,groups",
            "HARNESS_OIDC_ALLOWED_GROUPS": ALLOWED_GROUP,
            "HARNESS_OIDC_NAME": "Example Corp",
            **env,
        }
        site = OidcSite(server, provider)
        started.append(site)
        server.start()
        return site

    try:
        yield start
    finally:
        for site in started:
            site.server.stop()
            site.provider.stop()


@pytest.fixture
def oidc_site(oidc_site_with: Callable[..., OidcSite]) -> OidcSite:
    return oidc_site_with()
