"""Mail reaches people by the address they give: in Chromium at a laptop's and a
phone's width, a reviewer sets their address on the mail settings page (a wrong one
is refused, named); while mail is on, the page names the reviewers of their projects
whom no mail reaches; a request then mails them through the local mail catcher `make
up` starts (scripts/mail_catcher.py, a real aiosmtpd server), whose page, linked from
the settings, shows what was sent. Every page is axe clean and fits the screen."""

from __future__ import annotations

import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import Group, User
from playwright.sync_api import BrowserContext, expect

from notifications import mail
from tests.fixtures_services import ROOT
from tests.fixtures_web import SIZES, AsgiServer, free_port, screenshot, serious_problems, sign_in, waiting_scene

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@dataclass
class Catcher:
    smtp_port: int
    url: str
    folder: Path


@pytest.fixture
def catcher(tmp_path: Path) -> Iterator[Catcher]:
    smtp_port, http_port = free_port(), free_port()
    command = [sys.executable, str(ROOT / "scripts" / "mail_catcher.py"), "--smtp-port", str(smtp_port), "--http-port", str(http_port)]
    proc = subprocess.Popen([*command, "--dir", str(tmp_path / "mail")], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        assert "mail catcher: SMTP" in proc.stdout.readline(), "the catcher says where it listens once both servers are up"
        yield Catcher(smtp_port, f"http://127.0.0.1:{http_port}/", tmp_path / "mail")
    finally:
        proc.terminate()
        assert proc.wait(10) == 0, "SIGTERM ends the catcher cleanly"


@pytest.fixture
def mail_server(catcher: Catcher, settings: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[AsgiServer]:
    """The web server and this process (which files the request) with mail on, to the catcher."""
    settings.HARNESS_MAIL_ENABLED = True
    settings.HARNESS_MAIL_DIGEST_SECONDS = 0.0
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST, settings.EMAIL_PORT = "127.0.0.1", catcher.smtp_port
    settings.EMAIL_USE_TLS = settings.EMAIL_USE_SSL = False
    server = AsgiServer(tmp_path_factory.mktemp("daphne"), HARNESS_MAIL="1", HARNESS_MAIL_CATCHER_URL=catcher.url)
    server.start()
    try:
        yield server
    finally:
        server.stop()


def test_it_takes_a_reviewers_address_warns_of_those_without_and_shows_what_was_sent(
    mail_server: AsgiServer, catcher: Catcher, context: BrowserContext, size: str, reviewer: User, operator: User
) -> None:
    colleague = User.objects.create_user(username="ria", password="ria-pass-123")
    colleague.groups.add(Group.objects.get(name="reviewer"))
    width = SIZES[size]["width"]
    page = context.new_page()
    sign_in(page, mail_server, reviewer.username)
    page.goto(f"{mail_server.url}/mail/")
    expect(page.locator("#mail-unreachable")).to_contain_text(f"ria, {reviewer.username}")
    problems = serious_problems(page, "mail settings, no address", width)

    page.fill("#mail-address", "rita at example")
    page.click("button:has-text('Save')")
    expect(page.locator("#mail-settings-problem")).to_contain_text("'rita at example' is not a mail address")
    expect(page.locator("#mail-address")).to_have_value("rita at example")
    reviewer.refresh_from_db()
    assert reviewer.email == "", "a refused address is not saved"

    page.fill("#mail-address", "rita@example.com")
    page.click("button:has-text('Save')")
    page.wait_for_selector(".flash-success")
    reviewer.refresh_from_db()
    assert reviewer.email == "rita@example.com"
    expect(page.locator("#mail-unreachable")).to_contain_text("ria")
    expect(page.locator("#mail-unreachable")).not_to_contain_text(reviewer.username)
    problems += serious_problems(page, "mail settings", width)
    screenshot(page, f"mail_address_{size}")

    scene = waiting_scene(operator)
    assert [mail.attempt(mail_id).status for mail_id in mail.due()] == ["delivered"], "one mail: ria has no address"
    page.click("#mail-catcher a")
    page.wait_for_url(catcher.url)
    caught = page.locator("article")
    expect(caught).to_have_count(1)
    expect(caught).to_contain_text("rita@example.com")
    expect(caught).to_contain_text(f"/approvals/{scene.request.pk}/")
    problems += serious_problems(page, "mail catcher", width)
    screenshot(page, f"mail_catcher_{size}")
    assert not problems, "\n".join(problems)


def test_it_keeps_the_newest_mails_and_refuses_an_oversized_one(catcher: Catcher) -> None:
    import smtplib

    with smtplib.SMTP("127.0.0.1", catcher.smtp_port) as smtp:
        smtp.sendmail("a@example.com", ["b@example.com"], "Subject: <b>hi</b>\r\n\r\n<script>alert(1)</script>")
        with pytest.raises(smtplib.SMTPException):
            smtp.sendmail("a@example.com", ["b@example.com"], "Subject: big\r\n\r\n" + "x" * 1_100_000)
    with urllib.request.urlopen(catcher.url, timeout=10) as answer:
        shown = answer.read().decode()
    # The sender's text is shown as text, never as markup.
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in shown and "<script>" not in shown
    assert "&lt;b&gt;hi&lt;/b&gt;" in shown
    assert len(list(catcher.folder.glob("*.eml"))) == 1, "the oversized mail is refused whole, not kept in part"
