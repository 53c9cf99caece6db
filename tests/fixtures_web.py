"""Real web processes for tests: the ASGI app under Daphne on 127.0.0.1 (HTTP and
WebSockets, against the test database), and Debian's Chromium driven by Playwright.
Django models are imported inside functions: this plugin loads before Django is set up."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from tests.fixtures_services import ROOT, service_env

if TYPE_CHECKING:
    from playwright.sync_api import Browser, BrowserContext, Page, ViewportSize

    from approvals.models import ApprovalRequest
    from runs.models import Run
    from tests.helpers import World

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
SCREENSHOTS = ROOT / "docs" / "screenshots"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class AsgiServer:
    """A real ``daphne`` process serving harness_site.asgi; it can be stopped and
    started again on the same port (to drop every WebSocket)."""

    def __init__(self, log_dir: Path, **env: str) -> None:
        self.log_dir = log_dir
        self.env = env  # settings of this server's own (e.g. production ones)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0

    def start(self) -> None:
        self.starts += 1
        log = open(self.log_dir / f"daphne-{self.starts}.log", "wb")  # noqa: SIM115 - closed with the process
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(self.port), "harness_site.asgi:application"],
            cwd=ROOT,
            env=service_env(**self.env),
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self._wait_ready()

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(f"daphne exited with {self.proc.returncode}: {self.log()[-3000:]}")
            try:
                with urllib.request.urlopen(f"{self.url}/accounts/login/", timeout=2) as response:
                    if response.status == 200:
                        return
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                time.sleep(0.1)
        raise RuntimeError(f"daphne not ready after 30s: {self.log()[-3000:]}")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
        self.proc = None

    def pause(self) -> None:
        """Freeze the server without closing anything: its sockets stay open and silent."""
        assert self.proc is not None
        os.killpg(self.proc.pid, signal.SIGSTOP)

    def resume(self) -> None:
        assert self.proc is not None
        os.killpg(self.proc.pid, signal.SIGCONT)

    def log(self) -> str:
        return "\n".join(p.read_text(errors="replace") for p in sorted(self.log_dir.glob("daphne-*.log")))


@pytest.fixture
def live_server_asgi(transactional_db: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[AsgiServer]:
    """Daphne serving the app for one test; the test's data is committed (transactional)."""
    server = AsgiServer(tmp_path_factory.mktemp("daphne"))
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def chromium() -> Iterator[Browser]:
    """One browser per test module: Playwright's loop must not outlive the module,
    or other modules' async_to_sync calls on this thread would find it running."""
    from playwright.sync_api import sync_playwright

    # Playwright's sync API keeps an event loop on this thread; the test's own ORM
    # calls are still synchronous, so Django's async-safety guard does not apply.
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    try:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            try:
                yield browser
            finally:
                browser.close()
    finally:
        del os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"]


# A laptop's screen and a phone's: the pages are checked at both.
SIZES: dict[str, ViewportSize] = {"laptop": {"width": 1366, "height": 768}, "phone": {"width": 390, "height": 844}}


@pytest.fixture(params=list(SIZES))
def size(request: pytest.FixtureRequest) -> str:
    size: str = request.param
    return size


@pytest.fixture
def context(chromium: Browser, size: str) -> Iterator[BrowserContext]:
    context = chromium.new_context(viewport=SIZES[size], timezone_id="America/New_York")
    try:
        yield context
    finally:
        context.close()


@pytest.fixture
def browser_page(chromium: Browser) -> Iterator[Page]:
    context = chromium.new_context(viewport={"width": 1280, "height": 860})
    page = context.new_page()
    try:
        yield page
    finally:
        context.close()


def sign_in(page: Page, server: AsgiServer, username: str) -> None:
    page.goto(f"{server.url}/accounts/login/")
    page.fill("#id_username", username)
    page.fill("#id_password", f"{username}-pass-123")
    page.click("button[type=submit]")
    page.wait_for_url(lambda url: "/accounts/login/" not in url)


def screenshot(page: Page, name: str) -> None:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / f"{name}.png"), full_page=False)


def serious_problems(page: Page, name: str, width: int) -> list[str]:
    """axe-core's serious and critical findings on the page, and whether it is wider
    than the screen, each a line naming the page."""
    from axe_playwright_python.sync_playwright import Axe

    problems = [
        f"{name}: {v['id']} ({v['impact']}): {v['help']} at {[n['target'] for n in v['nodes']][:3]}"
        # label-content-name-mismatch is off in axe by default (experimental): on, a
        # control whose accessible name does not contain its visible words is found.
        for v in Axe().run(page, options={"rules": {"label-content-name-mismatch": {"enabled": True}}}).response["violations"]
        if v["impact"] in ("serious", "critical")
    ]
    if page.evaluate("document.documentElement.scrollWidth") > width:
        problems.append(f"{name}: wider than the {width} px screen")
    return problems


@dataclass
class Scene:
    """A run waiting for a reviewer to approve its publish, driven through the real
    Django store by the shared simulated world (tests.helpers)."""

    world: World
    run: Run
    request: ApprovalRequest


def waiting_scene(
    starter: Any, script: list[Any] | None = None, project_id: int | None = None, contract: dict[str, Any] | None = None
) -> Scene:
    from approvals.models import ApprovalRequest
    from runs.approval_flow.gate import DjangoApprovals
    from runs.services import drive_run
    from tests.helpers import CONTRACT, SCRIPT, World

    world = World()
    script = SCRIPT if script is None else script
    run = world.create(actor=starter, script=script, contract=contract or CONTRACT, project_id=project_id)
    state = drive_run(run, world.environment(), DjangoApprovals(run))
    assert state.status == "waiting_approval", state.outcome
    run.refresh_from_db()
    return Scene(world, run, ApprovalRequest.objects.get(run=run, status="pending"))
