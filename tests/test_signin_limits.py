"""Password guessing is refused after a few failures, on the sign-in page and the API's
token endpoint, per (username, client address), with the count in the real Redis."""

from __future__ import annotations

import time
import uuid
from typing import TYPE_CHECKING

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse
from pytest_django import Settings
from rest_framework.test import APIClient

from tests.fixtures_web import AsgiServer

if TYPE_CHECKING:
    from rest_framework.response import _MonkeyPatchedResponse  # the test client's response: only the stubs name it

# slow: each attempt is a PBKDF2 check, and the windows are waited out in real time.
pytestmark = [pytest.mark.django_db, pytest.mark.slow]

PASSWORD = "a-long-enough-pass-123"


@pytest.fixture
def limits(settings: Settings) -> Settings:
    settings.HARNESS_SIGNIN_MAX_FAILURES = 3
    settings.HARNESS_SIGNIN_WINDOW_SECONDS = 600
    return settings


@pytest.fixture
def person(db: None) -> User:
    # A fresh name per test: the counts live in Redis for the whole test session.
    return User.objects.create_user(username=f"guessed-{uuid.uuid4().hex[:8]}", password=PASSWORD)


def token_attempt(username: str, password: str, address: str = "10.0.0.1") -> _MonkeyPatchedResponse:
    return APIClient(REMOTE_ADDR=address).post("/api/auth/token/", {"username": username, "password": password}, format="json")


def test_it_refuses_the_token_endpoint_after_too_many_failures_even_with_the_right_password(limits: Settings, person: User) -> None:
    # Spellings that authenticate as the same user share one count.
    for spelling in (person.username, f" {person.username}", person.username.upper()):
        assert token_attempt(spelling, "guess").status_code == 400
    locked = token_attempt(person.username, PASSWORD)
    assert locked.status_code == 429
    assert "too many failed sign-ins" in locked.json()["detail"]
    assert 590 <= int(locked["Retry-After"]) <= 600
    # Another address, or another user from this address, is not held up.
    assert token_attempt(person.username, PASSWORD, address="10.0.0.2").status_code == 200
    other = User.objects.create_user(username=f"other-{uuid.uuid4().hex[:8]}", password=PASSWORD)
    assert token_attempt(other.username, PASSWORD).status_code == 200


def test_it_lets_the_user_in_again_after_the_window_and_a_success_clears_the_count(limits: Settings, person: User) -> None:
    # The window must outlast four password checks on a loaded machine (PBKDF2 each).
    limits.HARNESS_SIGNIN_WINDOW_SECONDS = 6
    started = time.monotonic()
    for _ in range(3):
        token_attempt(person.username, "guess")
    assert token_attempt(person.username, PASSWORD).status_code == 429
    time.sleep(max(0.0, started + 6.5 - time.monotonic()))
    assert token_attempt(person.username, PASSWORD).status_code == 200
    limits.HARNESS_SIGNIN_WINDOW_SECONDS = 600
    for _ in range(2):
        token_attempt(person.username, "guess")
    assert token_attempt(person.username, PASSWORD).status_code == 200  # clears the two failures
    for _ in range(2):
        token_attempt(person.username, "guess")
    assert token_attempt(person.username, PASSWORD).status_code == 200


def test_it_refuses_the_sign_in_page_after_too_many_failures(limits: Settings, person: User) -> None:
    client = Client(REMOTE_ADDR="10.0.0.3")
    for _ in range(3):
        page = client.post(reverse("login"), {"username": person.username, "password": "guess"})
        assert page.status_code == 200 and b"Please enter a correct username and password" in page.content
    page = client.post(reverse("login"), {"username": person.username, "password": PASSWORD})
    assert page.status_code == 200
    assert b"Too many failed sign-ins for this user from your address; try again in 10 minute(s)." in page.content
    assert "_auth_user_id" not in client.session


def test_it_warns_before_the_last_attempt_that_the_next_failure_locks_sign_in(limits: Settings, person: User) -> None:
    client = Client(REMOTE_ADDR="10.0.0.9")
    pages = [client.post(reverse("login"), {"username": person.username, "password": "guess"}).content for _ in range(3)]
    assert b"One more failed attempt" not in pages[0]
    assert b"One more failed attempt locks sign-in for this user from your address for up to 10 minute(s)." in pages[1]
    assert b"Sign-in is now locked for this user from your address for up to 10 minute(s)." in pages[2]
    assert all(b"Please enter a correct username and password" in page for page in pages)


def test_it_limits_one_address_trying_many_accounts_and_one_account_from_many_addresses(limits: Settings, person: User) -> None:
    limits.HARNESS_SIGNIN_MAX_FAILURES_PER_ADDRESS = 4
    limits.HARNESS_SIGNIN_MAX_FAILURES_PER_USER = 5
    address = f"10.9.{uuid.uuid4().int % 250}.{uuid.uuid4().int % 250}"
    for n in range(4):
        assert token_attempt(f"sprayed-{n}-{uuid.uuid4().hex[:6]}", "guess", address=address).status_code == 400
    assert token_attempt(person.username, PASSWORD, address=address).status_code == 429
    for n in range(5):
        assert token_attempt(person.username, "guess", address=f"10.8.0.{n}").status_code == 400
    assert token_attempt(person.username, PASSWORD, address="10.8.1.1").status_code == 429


def test_it_does_not_clear_the_count_when_the_page_is_posted_without_a_password(limits: Settings, person: User) -> None:
    client = Client(REMOTE_ADDR="10.0.0.6")
    for _ in range(2):
        client.post(reverse("login"), {"username": person.username, "password": "guess"})
    assert client.post(reverse("login"), {"username": person.username, "password": ""}).status_code == 200
    client.post(reverse("login"), {"username": person.username, "password": "guess"})
    page = client.post(reverse("login"), {"username": person.username, "password": PASSWORD})
    assert b"Too many failed sign-ins" in page.content


def test_it_refuses_the_admin_sign_in_page_after_too_many_failures(limits: Settings, person: User) -> None:
    person.is_staff = True
    person.save()
    client = Client(REMOTE_ADDR="10.0.0.4")
    for _ in range(3):
        assert (
            b"Please enter the correct username and password"
            in client.post("/admin/login/", {"username": person.username, "password": "guess"}).content
        )
    page = client.post("/admin/login/", {"username": person.username, "password": PASSWORD})
    assert b"Too many failed sign-ins" in page.content
    assert "_auth_user_id" not in client.session


def test_it_refuses_sign_in_when_attempts_cannot_be_counted(limits: Settings, person: User) -> None:
    # Fail-closed: without the shared counter no password is checked at all.
    limits.CACHES = {"default": {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": "redis://127.0.0.1:1/0"}}
    refused = token_attempt(person.username, PASSWORD)
    assert refused.status_code == 503 and "temporarily unavailable" in refused.json()["detail"]
    page = Client(REMOTE_ADDR="10.0.0.5").post(reverse("login"), {"username": person.username, "password": PASSWORD})
    assert b"Sign-in is temporarily unavailable" in page.content


@pytest.mark.django_db(transaction=True)
def test_it_admits_at_most_the_limit_of_concurrent_wrong_passwords(live_server_asgi: AsgiServer) -> None:
    # The web server reads its limit from the environment it started with (5 by default).
    import json
    import threading
    import urllib.error
    import urllib.request
    from concurrent.futures import ThreadPoolExecutor

    user = User.objects.create_user(username=f"raced-{uuid.uuid4().hex[:8]}", password=PASSWORD)
    start = threading.Barrier(20)

    def guess(_: int) -> int:
        body = json.dumps({"username": user.username, "password": "guess"}).encode()
        request = urllib.request.Request(f"{live_server_asgi.url}/api/auth/token/", data=body, headers={"Content-Type": "application/json"})
        start.wait()
        try:
            with urllib.request.urlopen(request, timeout=60) as response:
                status: int = response.status
                return status
        except urllib.error.HTTPError as exc:
            return exc.code

    with ThreadPoolExecutor(20) as pool:
        codes = list(pool.map(guess, range(20)))
    # 400: the password was checked (and was wrong); 429: refused before any check.
    assert sorted(set(codes)) == [400, 429], codes
    assert codes.count(400) == 5, codes
