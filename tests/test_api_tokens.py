"""API tokens are kept hashed: shown once by POST /api/auth/token/, not recoverable
from the database, refused after expiry or revocation (revoked in the admin) and after
their user's password changes, and a token made before the change (DRF's plaintext
table) keeps working once hashed."""

from __future__ import annotations

import hashlib
from datetime import timedelta
from importlib import import_module
from types import SimpleNamespace

import pytest
from django.apps import apps
from django.contrib.auth.models import User
from django.db import connection
from django.test import Client
from django.utils import timezone
from pytest_django import Settings
from rest_framework.test import APIClient

from api.models import ApiToken

pytestmark = pytest.mark.django_db


def token_for(user: User) -> str:
    response = APIClient().post("/api/auth/token/", {"username": user.username, "password": f"{user.username}-pass-123"}, format="json")
    assert response.status_code == 200, response.content
    body: dict[str, str] = response.json()
    assert set(body) == {"token", "expires_at"}
    return body["token"]


def status_with(token: str) -> int:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {token}")
    return client.get("/api/runs/").status_code


def all_database_text() -> str:
    chunks = []
    with connection.cursor() as cursor:
        for table in connection.introspection.table_names():
            cursor.execute(f"SELECT * FROM {connection.ops.quote_name(table)}")
            chunks += [str(value) for row in cursor.fetchall() for value in row]
    return "\n".join(chunks)


def test_it_keeps_only_a_hash_and_shows_the_token_once(operator: User) -> None:
    token = token_for(operator)
    assert status_with(token) == 200
    assert token not in all_database_text()
    row = ApiToken.objects.get(user=operator)
    assert row.digest == hashlib.sha256(token.encode()).hexdigest() and token.startswith(row.prefix)
    # Every call makes a new token: the old one is never shown again.
    assert token_for(operator) != token and ApiToken.objects.filter(user=operator).count() == 2


def test_it_refuses_an_expired_token(operator: User, settings: Settings) -> None:
    token = token_for(operator)
    ApiToken.objects.filter(user=operator).update(expires_at=timezone.now() - timedelta(seconds=1))
    assert status_with(token) == 401
    settings.HARNESS_API_TOKEN_DAYS = 7
    fresh = token_for(operator)
    row = ApiToken.find(fresh)
    assert row is not None
    assert timedelta(days=6, hours=23) < row.expires_at - timezone.now() <= timedelta(days=7)


def test_it_refuses_a_token_revoked_in_the_admin_and_lists_tokens_there(operator: User, admin_user: User, client: Client) -> None:
    token = token_for(operator)
    row = ApiToken.find(token)
    assert row is not None
    client.force_login(admin_user)
    listing = client.get("/admin/api/apitoken/")
    assert listing.status_code == 200 and row.prefix in listing.content.decode() and token not in listing.content.decode()
    done = client.post("/admin/api/apitoken/", {"action": "revoke", "_selected_action": [row.pk]}, follow=True)
    assert "Revoked 1 token(s)." in done.content.decode()
    assert status_with(token) == 401
    row.refresh_from_db()
    assert row.revoked_at is not None


def test_it_refuses_a_deactivated_users_token(operator: User) -> None:
    token = token_for(operator)
    operator.is_active = False
    operator.save()
    assert status_with(token) == 401


def test_it_hashes_the_old_plaintext_tokens_so_their_clients_keep_working(operator: User) -> None:
    with connection.cursor() as cursor:
        cursor.execute("CREATE TABLE authtoken_token (key varchar(40) PRIMARY KEY, user_id integer NOT NULL, created timestamp NOT NULL)")
        cursor.execute("INSERT INTO authtoken_token VALUES (%s, %s, %s)", ["a" * 40, operator.pk, timezone.now()])
    migration = import_module("api.migrations.0001_hashed_api_tokens")
    # The migration's step, on a database that still has DRF's plaintext table.
    migration.hash_plaintext_tokens(apps, SimpleNamespace(connection=connection))
    assert "authtoken_token" not in connection.introspection.table_names()
    import_module("api.migrations.0002_token_password_mark").mark_current_passwords(apps, None)
    assert status_with("a" * 40) == 200 and "a" * 40 not in all_database_text()


def refusal_with(token: str) -> tuple[int, str]:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {token}")
    response = client.get("/api/runs/")
    return response.status_code, response.json()["detail"]


PASSWORD_CHANGED = (401, "The token was made before the user's password last changed; get a new one.")


def test_it_voids_a_users_tokens_when_an_admin_changes_their_password(operator: User, reviewer: User, client: Client) -> None:
    tokens = [token_for(operator), token_for(operator)]
    others = token_for(reviewer)
    # Users and their passwords are the superuser's to manage, not the admin role's.
    client.force_login(User.objects.create_superuser("sue-superuser", password="sue-superuser-pass-123"))
    changed = client.post(
        f"/admin/auth/user/{operator.pk}/password/",
        {"password1": "a-new-pass-456", "password2": "a-new-pass-456", "usable_password": "true"},
    )
    assert changed.status_code == 302, changed.content.decode()[-2000:]
    assert [refusal_with(token) for token in tokens] == [PASSWORD_CHANGED, PASSWORD_CHANGED]
    assert status_with(others) == 200  # another user's token is untouched
    listing = client.get("/admin/api/apitoken/").content.decode()
    assert listing.count("void: the password changed") == 2 and listing.count("usable") == 1
    # The new password makes a token that works.
    fresh = APIClient().post("/api/auth/token/", {"username": operator.username, "password": "a-new-pass-456"}, format="json")
    assert status_with(fresh.json()["token"]) == 200


def test_it_voids_tokens_whatever_wrote_the_new_password(operator: User) -> None:
    token = token_for(operator)
    operator.set_password("changed-by-a-reset-789")
    operator.save()
    assert refusal_with(token) == PASSWORD_CHANGED
    fresh = APIClient().post("/api/auth/token/", {"username": operator.username, "password": "changed-by-a-reset-789"}, format="json")
    assert status_with(fresh.json()["token"]) == 200
    # A bulk UPDATE sends no signal and calls no save(): the mark still tells.
    operator.set_unusable_password()
    User.objects.filter(pk=operator.pk).update(password=operator.password)
    assert refusal_with(fresh.json()["token"]) == PASSWORD_CHANGED
