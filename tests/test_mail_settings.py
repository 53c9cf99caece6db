"""The mail settings page in Chromium: a reviewer chooses, per project, which
requests they are mailed about; the page is axe clean and fits a laptop and a phone;
a choice for a project where they decide nothing is refused."""

from __future__ import annotations

import re

import pytest
import requests
from django.contrib.auth.models import User
from playwright.sync_api import BrowserContext

from notifications.models import MailPreference
from projects.models import DEFAULT_PROJECT, Project
from tests.fixtures_web import SIZES, AsgiServer, screenshot, serious_problems, sign_in
from tests.test_session_sockets import signed_in

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_it_saves_a_reviewers_choice_per_project(live_server_asgi: AsgiServer, context: BrowserContext, size: str, reviewer: User) -> None:
    page = context.new_page()
    sign_in(page, live_server_asgi, reviewer.username)
    page.goto(f"{live_server_asgi.url}/approvals/")
    page.click("#mail-settings-link")
    project = Project.objects.get(slug=DEFAULT_PROJECT)
    page.select_option(f"#project-{project.pk}", "none")
    page.click("button:has-text('Save')")
    page.wait_for_selector(".flash-success")
    assert MailPreference.objects.get(user=reviewer, project=project).choice == "none"
    assert serious_problems(page, f"mail settings ({size})", SIZES[size]["width"]) == []
    screenshot(page, f"mail-settings-{size}")


def test_it_refuses_a_choice_for_another_project(live_server_asgi: AsgiServer, reviewer: User, other_project: Project) -> None:
    http: requests.Session = signed_in(live_server_asgi, reviewer)
    form = http.get(f"{live_server_asgi.url}/mail/")
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', form.text)
    assert token is not None
    answer = http.post(
        f"{live_server_asgi.url}/mail/",
        data={"csrfmiddlewaretoken": token.group(1), f"project-{other_project.pk}": "none"},
        headers={"Referer": f"{live_server_asgi.url}/mail/"},
    )
    assert answer.status_code == 400 and "only for projects where you decide" in answer.text
    assert not MailPreference.objects.exists()
