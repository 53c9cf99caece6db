"""Signing in with a real OpenID provider (oidc-provider under Node, tests/oidc) in
Chromium: the provider's groups become project roles, someone outside the allowed
groups is refused with a clear page, a tampered state and a replayed code are refused,
sign-out ends the session, and a group removed at the provider takes the role away at
the next sign-in and closes the sockets that role allowed."""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

import pytest
import requests
from django.contrib.auth.models import Group, User
from playwright.sync_api import Browser, BrowserContext, Page

from api.models import ApiToken
from common import permissions
from projects.access import is_site_admin, permissions_in
from projects.models import DEFAULT_PROJECT, AuditEntry, Membership, Project, Role
from projects.roles import PROJECT_ROLES
from signin.models import GroupMapping, Identity
from tests.fixtures_oidc import ALLOWED_GROUP, OidcSite
from tests.fixtures_web import SIZES, screenshot, serious_problems
from tests.helpers import World
from tests.test_session_sockets import CLOSE_WITHIN_SECONDS, closed_within, watch

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
REVIEWERS = "acme-reviewers"


@pytest.fixture
def acme() -> Project:
    """A project whose reviewers are a Harness group an admin mapped the provider's
    group of that name onto."""
    project = Project.objects.create(slug="acme", name="Acme")
    group = Group.objects.create(name=REVIEWERS)
    Membership.objects.create(project=project, group=group, role=Role.REVIEWER)
    GroupMapping.objects.create(provider_group=REVIEWERS, group=group)
    return project


@pytest.fixture
def browser_context(chromium: Browser) -> Iterator[BrowserContext]:
    context = chromium.new_context(viewport=SIZES["laptop"])
    # The provider's development pages import a web font; there is no internet here.
    context.route(re.compile(r"^https://fonts\.(googleapis|gstatic)\.com/"), lambda route: route.abort())
    try:
        yield context
    finally:
        context.close()


def at_provider(page: Page, login: str) -> None:
    """The provider's own login form (any password for a known login)."""
    page.fill("input[name=login]", login)
    page.fill("input[name=password]", "whatever-the-provider-checks")
    page.click("button[type=submit]")


def sign_in(page: Page, site: OidcSite, login: str) -> None:
    page.goto(f"{site.server.url}/accounts/login/")
    page.click("#oidc-sign-in")
    if page.url.startswith(site.provider.issuer):
        at_provider(page, login)
    page.wait_for_url(lambda url: url.startswith(site.server.url))


def callbacks(page: Page, site: OidcSite) -> list[str]:
    """Records every callback URL the provider sends the browser to."""
    seen: list[str] = []
    page.on("request", lambda request: seen.append(request.url) if request.url.startswith(f"{site.server.url}/oidc/callback/") else None)
    return seen


@contextmanager
def callback_stopped(page: Page, site: OidcSite) -> Iterator[list[str]]:
    """Stops the browser at the callback the provider sends it to (the URLs it would
    have opened are listed), until the block ends. Through the DevTools protocol's
    Fetch domain: the callback ends a redirect chain, which Playwright's routing leaves alone."""
    seen: list[str] = []
    devtools = page.context.new_cdp_session(page)

    def paused(event: dict[str, Any]) -> None:
        seen.append(event["request"]["url"])
        devtools.send("Fetch.failRequest", {"requestId": event["requestId"], "errorReason": "Aborted"})

    devtools.on("Fetch.requestPaused", paused)
    devtools.send("Fetch.enable", {"patterns": [{"urlPattern": f"{site.server.url}/oidc/callback/*"}]})
    try:
        yield seen
        deadline = time.monotonic() + 10
        while not seen and time.monotonic() < deadline:
            page.wait_for_timeout(50)
    finally:
        devtools.send("Fetch.disable")
        devtools.detach()


def refusal(page: Page) -> str:
    return page.locator("#sign-in-refused").inner_text()


def signed_in_as(page: Page, site: OidcSite) -> str | None:
    """The username the page header shows, or None when the site asks to sign in."""
    page.goto(f"{site.server.url}/runs/")
    if "/accounts/login/" in page.url:
        return None
    return page.locator("header").inner_text()


def test_it_maps_the_providers_groups_onto_project_roles(oidc_site: OidcSite, acme: Project, browser_context: BrowserContext) -> None:
    oidc_site.provider.set_account("alice", [ALLOWED_GROUP, REVIEWERS, "not-in-harness"])
    page = browser_context.new_page()
    page.goto(f"{oidc_site.server.url}/accounts/login/")
    for size, viewport in SIZES.items():
        page.set_viewport_size(viewport)
        assert serious_problems(page, f"sign-in with provider ({size})", viewport["width"]) == []
        screenshot(page, f"signin-provider-{size}")
    sign_in(page, oidc_site, "alice")

    alice = User.objects.get(identity__subject="alice", identity__issuer=oidc_site.provider.issuer)
    assert alice.username == "alice" and alice.email == "alice@example.com"
    assert not alice.has_usable_password()
    assert sorted(alice.groups.values_list("name", flat=True)) == [REVIEWERS]
    assert permissions.DECIDE_APPROVALS in permissions_in(alice, acme.pk)
    assert Identity.objects.get(user=alice).groups == sorted([ALLOWED_GROUP, REVIEWERS, "not-in-harness"])
    assert "alice" in (signed_in_as(page, oidc_site) or "")
    page.goto(f"{oidc_site.server.url}/approvals/")
    assert page.locator("h1").first.is_visible()


def test_it_refuses_someone_outside_the_allowed_groups_with_a_clear_page(
    oidc_site: OidcSite, acme: Project, browser_context: BrowserContext
) -> None:
    oidc_site.provider.set_account("mallory", ["contractors", REVIEWERS])
    page = browser_context.new_page()
    responses: list[int] = []
    page.on("response", lambda r: responses.append(r.status) if "/oidc/callback/" in r.url else None)
    sign_in(page, oidc_site, "mallory")
    assert responses == [403]
    assert "not in a group that may sign in" in refusal(page)
    for size, viewport in SIZES.items():
        page.set_viewport_size(viewport)
        assert serious_problems(page, f"refused ({size})", viewport["width"]) == []
        screenshot(page, f"signin-refused-{size}")
    assert signed_in_as(page, oidc_site) is None
    assert not User.objects.filter(username="mallory").exists()


def test_it_refuses_a_tampered_state_and_accepts_the_real_one(oidc_site: OidcSite, browser_context: BrowserContext) -> None:
    oidc_site.provider.set_account("alice", [ALLOWED_GROUP])
    page = browser_context.new_page()
    page.goto(f"{oidc_site.server.url}/accounts/login/")
    page.click("#oidc-sign-in")
    with callback_stopped(page, oidc_site) as seen:
        at_provider(page, "alice")
    (real,) = seen
    query = parse_qs(urlsplit(real).query)
    tampered = {**{k: v[0] for k, v in query.items()}, "state": query["state"][0][:-4] + "AAAA"}

    answer = page.goto(f"{oidc_site.server.url}/oidc/callback/?{urlencode(tampered)}")
    assert answer is not None and answer.status == 403
    assert "not one this browser started" in refusal(page)
    assert "Traceback" not in page.content()
    assert signed_in_as(page, oidc_site) is None

    page.goto(real)
    assert page.locator("#sign-in-refused").count() == 0
    assert "alice" in (signed_in_as(page, oidc_site) or "")


def test_it_refuses_a_replayed_code(oidc_site: OidcSite, browser_context: BrowserContext) -> None:
    oidc_site.provider.set_account("alice", [ALLOWED_GROUP])
    page = browser_context.new_page()
    seen = callbacks(page, oidc_site)
    sign_in(page, oidc_site, "alice")
    (first,) = seen
    # The same callback again: its state was used up.
    answer = page.goto(first)
    assert answer is not None and answer.status == 403
    assert "used already" in refusal(page)

    # Signed out, a new sign-in's state with the old code: the provider refuses the code.
    page.goto(f"{oidc_site.server.url}/runs/")
    page.click("text=Sign out")
    page.wait_for_url(re.compile(r"/accounts/login/"))
    with callback_stopped(page, oidc_site) as stopped:
        page.click("#oidc-sign-in")  # the provider remembers alice: straight back
    (second,) = stopped
    new_state = parse_qs(urlsplit(second).query)["state"][0]
    old_code = parse_qs(urlsplit(first).query)["code"][0]
    answer = page.goto(f"{oidc_site.server.url}/oidc/callback/?{urlencode({'code': old_code, 'state': new_state})}")
    assert answer is not None and answer.status == 403
    assert "did not complete" in refusal(page)
    assert "Traceback" not in page.content()
    assert signed_in_as(page, oidc_site) is None


def test_it_signs_out(oidc_site: OidcSite, browser_context: BrowserContext) -> None:
    oidc_site.provider.set_account("alice", [ALLOWED_GROUP])
    page = browser_context.new_page()
    sign_in(page, oidc_site, "alice")
    assert signed_in_as(page, oidc_site) is not None
    page.click("text=Sign out")
    page.wait_for_url(re.compile(r"/accounts/login/"))
    assert signed_in_as(page, oidc_site) is None


def test_it_takes_a_role_removed_at_the_provider_away_at_the_next_sign_in(
    oidc_site: OidcSite, acme: Project, chromium: Browser, browser_context: BrowserContext
) -> None:
    oidc_site.provider.set_account("alice", [ALLOWED_GROUP, REVIEWERS])
    page = browser_context.new_page()
    sign_in(page, oidc_site, "alice")
    alice = User.objects.get(username="alice")
    run = World().create(project_id=acme.pk)
    http = requests.Session()
    for cookie in browser_context.cookies(oidc_site.server.url):
        http.cookies.set(cookie["name"], cookie["value"])
    socket = watch(oidc_site.server, http, str(run.id))

    oidc_site.provider.set_account("alice", [ALLOWED_GROUP])
    assert permissions.VIEW_RUNS in permissions_in(alice, acme.pk)  # nothing changes until she signs in
    laptop = chromium.new_context(viewport=SIZES["laptop"])
    try:
        laptop.route(re.compile(r"^https://fonts\.(googleapis|gstatic)\.com/"), lambda route: route.abort())
        sign_in(laptop.new_page(), oidc_site, "alice")
    finally:
        laptop.close()

    alice = User.objects.get(username="alice")
    assert list(alice.groups.all()) == []
    assert permissions_in(alice, acme.pk) == frozenset()
    code, _error, _took = closed_within(socket, CLOSE_WITHIN_SECONDS)
    assert code != 1006, "the server closed the socket, not the network"


def new_browser(chromium: Browser) -> BrowserContext:
    context = chromium.new_context(viewport=SIZES["laptop"])
    context.route(re.compile(r"^https://fonts\.(googleapis|gstatic)\.com/"), lambda route: route.abort())
    return context


def test_it_grants_nothing_for_a_provider_group_named_admin_reviewer_or_operator_until_an_admin_maps_it(
    oidc_site: OidcSite, acme: Project, chromium: Browser, browser_context: BrowserContext
) -> None:
    oidc_site.provider.set_account("mallory", [ALLOWED_GROUP, "admin", "reviewer", "operator"])
    page = browser_context.new_page()
    sign_in(page, oidc_site, "mallory")
    mallory = User.objects.get(username="mallory")
    default = Project.objects.get(slug=DEFAULT_PROJECT)
    assert list(mallory.groups.all()) == [] and not is_site_admin(mallory)
    assert permissions_in(mallory, default.pk) == frozenset() and permissions_in(mallory, acme.pk) == frozenset()
    answer = page.goto(f"{oidc_site.server.url}/admin/")
    assert answer is not None and "/admin/login/" in page.url, "the provider's 'admin' group opened the admin"

    # An admin maps the provider's "admin" group onto one role in one project: exactly that, at her next sign-in.
    GroupMapping.objects.create(provider_group="admin", project=acme, role=Role.REVIEWER)
    again = new_browser(chromium)
    try:
        sign_in(again.new_page(), oidc_site, "mallory")
    finally:
        again.close()
    mallory = User.objects.get(username="mallory")
    assert list(mallory.groups.all()) == [] and not is_site_admin(mallory)
    assert permissions_in(mallory, acme.pk) == PROJECT_ROLES[Role.REVIEWER]
    assert permissions_in(mallory, default.pk) == frozenset()
    entry = AuditEntry.objects.get(action="signin_groups_changed")
    assert entry.detail == {"user": "mallory", "roles_added": [{"project": "acme", "role": "reviewer"}]}


def test_it_ends_the_sessions_and_tokens_of_someone_removed_at_the_provider(
    oidc_site: OidcSite, acme: Project, chromium: Browser, browser_context: BrowserContext
) -> None:
    oidc_site.provider.set_account("alice", [ALLOWED_GROUP, REVIEWERS])
    page = browser_context.new_page()
    sign_in(page, oidc_site, "alice")
    alice = User.objects.get(username="alice")
    page.goto(f"{oidc_site.server.url}/tokens/")
    page.click("#make-token")
    token = page.locator("#token-value").inner_text().strip()
    api = requests.Session()
    api.headers["Authorization"] = f"Token {token}"
    assert api.get(f"{oidc_site.server.url}/api/runs/").status_code == 200
    run = World().create(project_id=acme.pk)
    http = requests.Session()
    for cookie in browser_context.cookies(oidc_site.server.url):
        http.cookies.set(cookie["name"], cookie["value"])
    socket = watch(oidc_site.server, http, str(run.id))

    oidc_site.provider.set_account("alice", ["contractors"])  # removed at the provider
    other = new_browser(chromium)
    try:
        refused_page = other.new_page()
        sign_in(refused_page, oidc_site, "alice")
        assert "not in a group that may sign in" in refusal(refused_page)
    finally:
        other.close()

    assert signed_in_as(page, oidc_site) is None, "her open session still works"
    assert api.get(f"{oidc_site.server.url}/api/runs/").status_code == 401, "her token still works"
    code, _error, _took = closed_within(socket, CLOSE_WITHIN_SECONDS)
    assert code != 1006, "the server closed the socket, not the network"
    alice = User.objects.get(username="alice")
    assert list(alice.groups.all()) == [] and permissions_in(alice, acme.pk) == frozenset()
    (revoked,) = ApiToken.objects.filter(user=alice)
    assert revoked.revoked_at is not None and "the identity provider refused your sign-in" in revoked.revoked_reason
    entry = AuditEntry.objects.get(action="offboarded")
    assert entry.detail["tokens_revoked"] == 1 and entry.detail["groups_removed"] == [REVIEWERS]


def test_it_refuses_passwords_when_switched_off(oidc_site_with: Callable[..., OidcSite], reviewer: User) -> None:
    site = oidc_site_with(HARNESS_PASSWORD_SIGNIN="0")
    http = requests.Session()
    page = http.get(f"{site.server.url}/accounts/login/")
    assert 'id="oidc-sign-in"' in page.text and 'name="password"' not in page.text
    # A password posted anyway (with a valid CSRF token, from the admin's form) is
    # refused by the sign-in page and by the admin's, which no backend checks any more.
    admin_form = http.get(f"{site.server.url}/admin/login/")
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', admin_form.text)
    assert token is not None
    guess = {"username": reviewer.username, "password": f"{reviewer.username}-pass-123", "csrfmiddlewaretoken": token.group(1)}
    answer = http.post(f"{site.server.url}/accounts/login/", data=guess, headers={"Referer": f"{site.server.url}/accounts/login/"})
    assert answer.status_code == 403 and "Passwords are switched off" in answer.text
    answer = http.post(f"{site.server.url}/admin/login/", data=guess, headers={"Referer": f"{site.server.url}/admin/login/"})
    assert answer.status_code == 200 and "sessionid" not in http.cookies
