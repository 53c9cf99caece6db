"""A provider's group is not a role (issue 39, findings 1 and 3): sign-in maps the
provider's groups only through the mappings an admin made (signin.GroupMapping), never
onto a Harness group of the same name (the built-in ``admin``, ``reviewer`` and
``operator`` least of all); what a sign-in changed is in the audit; and a person the
provider refuses loses, at that refused sign-in, their sessions, their API tokens
(revoked with the reason, shown on their token list) and what the provider's groups
gave them. The sign-in's decision is tested here through ``signin.backend.sign_in``
with the claims a provider sends; tests/test_oidc_signin.py drives the real provider."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import Group, User
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.test import Client
from pytest_django import Settings

from api.models import ApiToken
from projects.access import is_site_admin, permissions_in
from projects.models import DEFAULT_PROJECT, AuditEntry, Membership, Project, Role
from projects.roles import PROJECT_ROLES
from signin.backend import sign_in
from signin.groups import SignInRefused
from signin.models import GroupMapping

pytestmark = pytest.mark.django_db
ISSUER = "https://id.example.com"
ALLOWED = "harness-users"


@pytest.fixture(autouse=True)
def provider(settings: Settings) -> None:
    settings.HARNESS_OIDC_ISSUER = ISSUER
    settings.HARNESS_OIDC_ALLOWED_GROUPS = [ALLOWED]
    settings.HARNESS_OIDC_GROUPS_CLAIM = "groups"


def claims(login: str, *groups: str) -> dict[str, Any]:
    return {"sub": login, "preferred_username": login, "email": f"{login}@example.com", "groups": [ALLOWED, *groups]}


def test_it_grants_nothing_for_provider_groups_named_like_harness_groups() -> None:
    acme = Project.objects.create(slug="acme", name="Acme")
    Membership.objects.create(project=acme, group=Group.objects.create(name="acme-reviewers"), role=Role.REVIEWER)
    user = sign_in(claims("mallory", "admin", "reviewer", "operator", "acme-reviewers"))
    assert list(user.groups.all()) == []
    assert not is_site_admin(user)
    default = Project.objects.get(slug=DEFAULT_PROJECT)
    assert permissions_in(user, default.pk) == frozenset() and permissions_in(user, acme.pk) == frozenset()


def test_it_grants_exactly_what_an_admin_mapped_and_takes_it_back() -> None:
    acme = Project.objects.create(slug="acme", name="Acme")
    GroupMapping.objects.create(provider_group="admin", project=acme, role=Role.REVIEWER)
    GroupMapping.objects.create(provider_group="platform", group=Group.objects.get(name="operator"))
    user = sign_in(claims("alice", "admin", "platform", "reviewer"))
    assert sorted(user.groups.values_list("name", flat=True)) == ["operator"]
    assert not is_site_admin(user)
    assert permissions_in(user, acme.pk) == PROJECT_ROLES[Role.REVIEWER]
    (membership,) = Membership.objects.filter(user=user)
    assert (membership.project, membership.role, membership.via_provider) == (acme, Role.REVIEWER, True)
    added = AuditEntry.objects.filter(action="signin_groups_changed").get()
    assert added.detail["user"] == "alice" and added.detail["groups_added"] == ["operator"]
    assert added.detail["roles_added"] == [{"project": "acme", "role": "reviewer"}]

    # A role and a group given in person stay when the provider's groups go.
    sales = Group.objects.create(name="sales")
    user.groups.add(sales)
    Membership.objects.create(project=Project.objects.get(slug=DEFAULT_PROJECT), user=user, role=Role.OPERATOR)
    user = sign_in(claims("alice"))
    assert sorted(user.groups.values_list("name", flat=True)) == ["sales"]
    assert sorted(Membership.objects.filter(user=user).values_list("project__slug", "role")) == [(DEFAULT_PROJECT, "operator")]
    removed = AuditEntry.objects.filter(action="signin_groups_changed").order_by("-pk").first()
    assert removed is not None and removed.detail["groups_removed"] == ["operator"]
    assert removed.detail["roles_removed"] == [{"project": "acme", "role": "reviewer"}]


def test_it_keeps_a_group_held_in_person_that_a_mapping_also_gives() -> None:
    GroupMapping.objects.create(provider_group="platform", group=Group.objects.get(name="operator"))
    user = sign_in(claims("alice"))
    user.groups.add(Group.objects.get(name="operator"))  # an admin's doing
    sign_in(claims("alice", "platform"))
    user = sign_in(claims("alice"))
    assert list(user.groups.values_list("name", flat=True)) == ["operator"]


def signed_in_client(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_it_offboards_a_person_the_provider_refuses(reviewer: User) -> None:
    acme = Project.objects.create(slug="acme", name="Acme")
    GroupMapping.objects.create(provider_group="acme-reviewers", project=acme, role=Role.REVIEWER)
    GroupMapping.objects.create(provider_group="platform", group=Group.objects.get(name="operator"))
    alice = sign_in(claims("alice", "acme-reviewers", "platform"))
    Membership.objects.create(project=acme, user=alice, role=Role.OPERATOR)  # in person
    browser = signed_in_client(alice)
    assert browser.get("/tokens/").status_code == 200
    _row, token = ApiToken.issue(alice)
    api = Client(HTTP_AUTHORIZATION=f"Token {token}")
    assert api.get("/api/runs/").status_code == 200
    _others, others_token = ApiToken.issue(reviewer)

    with pytest.raises(SignInRefused):
        sign_in({**claims("alice"), "groups": ["contractors"]})  # no longer in the allowed group

    assert browser.get("/tokens/").status_code == 302, "the open session still works"
    assert api.get("/api/runs/").status_code in (401, 403), "the token still works"
    assert Client(HTTP_AUTHORIZATION=f"Token {others_token}").get("/api/runs/").status_code == 200
    alice.refresh_from_db()
    assert list(alice.groups.all()) == []
    assert list(Membership.objects.filter(user=alice).values_list("role", flat=True)) == [Role.OPERATOR]
    (revoked,) = ApiToken.objects.filter(user=alice)
    assert revoked.revoked_at is not None and "refused" in revoked.revoked_reason
    entry = AuditEntry.objects.get(action="offboarded")
    assert entry.detail["user"] == "alice" and entry.detail["tokens_revoked"] == 1
    assert entry.detail["groups_removed"] == ["operator"]
    assert entry.detail["roles_removed"] == [{"project": "acme", "role": "reviewer"}]

    # Let in again, they see why their old token stopped (and make a new one).
    alice = sign_in(claims("alice", "acme-reviewers"))
    page = signed_in_client(alice).get("/tokens/").content.decode()
    assert revoked.prefix in page and "the identity provider refused your sign-in" in page


def test_it_offboards_no_one_for_a_refused_stranger() -> None:
    with pytest.raises(SignInRefused):
        sign_in({**claims("stranger"), "groups": ["contractors"]})
    assert not User.objects.exists()
    assert not AuditEntry.objects.filter(action="offboarded").exists()


def test_it_puts_users_groups_and_the_mappings_on_the_admin_home_for_site_admins(admin_user: User, project_admin: User) -> None:
    site = Client(enforce_csrf_checks=True)
    site.force_login(admin_user)
    home = site.get("/admin/").content.decode()
    for link in ("/admin/auth/user/", "/admin/auth/group/", "/admin/signin/groupmapping/", "/admin/signin/identity/"):
        assert f'href="{link}"' in home, link
    assert site.get("/admin/auth/user/").status_code == 200

    form = site.get("/admin/signin/groupmapping/add/")
    assert form.status_code == 200
    csrf = site.cookies["csrftoken"].value
    acme = Project.objects.create(slug="acme", name="Acme")
    both = {"provider_group": "admin", "group": Group.objects.get(name="admin").pk, "project": acme.pk, "role": "reviewer"}
    refused = site.post("/admin/signin/groupmapping/add/", {**both, "csrfmiddlewaretoken": csrf})
    assert refused.status_code == 200 and "not both" in refused.content.decode()
    added = site.post(
        "/admin/signin/groupmapping/add/", {"provider_group": "admin", "project": acme.pk, "role": "reviewer", "csrfmiddlewaretoken": csrf}
    )
    assert added.status_code == 302
    (mapping,) = GroupMapping.objects.all()
    assert mapping.gives() == "Reviewer in acme"
    entry = AuditEntry.objects.get(action="group_mapping_added")
    assert entry.actor == admin_user and entry.project == acme and entry.detail == {"provider_group": "admin", "role": "reviewer"}
    assert is_site_admin(admin_user) and permissions_in(sign_in(claims("alice", "admin")), acme.pk) == PROJECT_ROLES[Role.REVIEWER]

    # A project's admin enters the admin for their project, and finds no users there.
    theirs = Client()
    theirs.force_login(project_admin)
    assert theirs.get("/admin/").status_code == 200
    for path in ("/admin/auth/user/", "/admin/signin/groupmapping/", "/admin/signin/identity/"):
        assert theirs.get(path).status_code == 403, path


@pytest.mark.django_db(transaction=True)
def test_it_migrates_what_matched_by_name_except_the_built_in_groups() -> None:
    before, after = [("signin", "0001_initial")], [("signin", "0002_identity_granted_groups_groupmapping")]
    executor = MigrationExecutor(connection)
    executor.migrate(before)
    old = executor.loader.project_state(before).apps
    people, groups = old.get_model("auth", "User"), old.get_model("auth", "Group")
    alice = people.objects.create(username="alice")
    held = [groups.objects.get_or_create(name=name)[0] for name in ("admin", "acme-reviewers")]
    alice.groups.set(held)
    groups.objects.create(name="release")  # a Harness group no provider group matched
    old.get_model("signin", "Identity").objects.create(
        user=alice, issuer=ISSUER, subject="alice", groups=[ALLOWED, "admin", "acme-reviewers"]
    )
    try:
        MigrationExecutor(connection).migrate(after)
        assert list(GroupMapping.objects.values_list("provider_group", "group__name", "role")) == [("acme-reviewers", "acme-reviewers", "")]
        identity = User.objects.get(username="alice").identity
        assert sorted(identity.granted_groups) == sorted(g.pk for g in held)
        # Her next sign-in keeps the mapped group and takes the built-in one away.
        user = sign_in(claims("alice", "admin", "acme-reviewers"))
        assert list(user.groups.values_list("name", flat=True)) == ["acme-reviewers"]
    finally:
        MigrationExecutor(connection).migrate(MigrationExecutor(connection).loader.graph.leaf_nodes())
