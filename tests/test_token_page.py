"""A person's API tokens page (api.token_pages): their tokens alone, a narrowing they
hold refused otherwise with the field named, another person's token not found, and
no page without signing in."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.test import Client

from api.models import ApiToken
from projects.models import Project

pytestmark = pytest.mark.django_db


def signed_in(user: User) -> Client:
    client = Client(enforce_csrf_checks=True)
    client.force_login(user)
    return client


def post(client: Client, path: str, data: dict[str, str]) -> int:
    client.get("/tokens/")
    return client.post(path, {**data, "csrfmiddlewaretoken": client.cookies["csrftoken"].value}).status_code


def test_it_lists_ones_own_tokens_alone_and_refuses_to_revoke_anothers(reviewer: User, other_member: User) -> None:
    mine, _token = ApiToken.issue(reviewer)
    theirs, _token = ApiToken.issue(other_member)
    client = signed_in(reviewer)
    page = client.get("/tokens/").content.decode()
    assert mine.prefix in page and theirs.prefix not in page
    assert post(client, f"/tokens/{theirs.pk}/revoke/", {}) == 404
    theirs.refresh_from_db()
    assert theirs.revoked_at is None
    assert post(client, f"/tokens/{mine.pk}/revoke/", {}) == 302
    mine.refresh_from_db()
    assert mine.revoked_at is not None


def test_it_names_the_field_of_a_narrowing_refused_and_makes_none(other_member: User, other_project: Project) -> None:
    client = signed_in(other_member)
    client.get("/tokens/")
    csrf = client.cookies["csrftoken"].value
    half = client.post("/tokens/", {"project": "elsewhere", "role": "", "csrfmiddlewaretoken": csrf})
    assert half.status_code == 400 and "Give a project and a role together, or neither." in half.content.decode()
    wider = client.post("/tokens/", {"project": "elsewhere", "role": "admin", "csrfmiddlewaretoken": csrf})
    assert wider.status_code == 400 and "You do not hold the admin role" in wider.content.decode()
    # Another project's name is answered as one that does not exist (the choice is not offered).
    assert client.post("/tokens/", {"project": "default", "role": "reviewer", "csrfmiddlewaretoken": csrf}).status_code == 400
    assert not ApiToken.objects.exists()
    made = client.post("/tokens/", {"project": "elsewhere", "role": "reviewer", "csrfmiddlewaretoken": csrf})
    assert made.status_code == 200
    row = ApiToken.objects.get(user=other_member)
    assert row.project == other_project and row.role == "reviewer"


def test_it_sends_a_visitor_to_sign_in_and_refuses_a_post_without_its_csrf_token(reviewer: User) -> None:
    assert Client().get("/tokens/").status_code == 302
    assert signed_in(reviewer).post("/tokens/", {"project": "", "role": ""}).status_code == 403
    assert not ApiToken.objects.exists()
