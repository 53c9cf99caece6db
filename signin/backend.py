"""Signing in with the OpenID provider: mozilla-django-oidc does the authorization
code flow (state, nonce and PKCE, the token request, the ID token's signature);
this backend decides who that is in Harness.

- The ID token must be from the configured issuer and for this client (``iss`` and
  ``aud``, which the library leaves unchecked).
- The person is found by (issuer, subject) in signin.Identity and created at their
  first sign-in; email and username never match an existing account.
- Their groups (the ID token's and userinfo's ``HARNESS_OIDC_GROUPS_CLAIM``) must meet
  ``HARNESS_OIDC_ALLOWED_GROUPS``; at every sign-in they give what the admins mapped
  them onto (signin.GroupMapping: a Harness group or a project role), never a
  Harness group by its name. A known person refused is offboarded
  (signin.groups.offboard): their sessions, tokens and mapped roles end."""

from __future__ import annotations

import hashlib
import re
from typing import Any

from django.conf import settings
from django.contrib.auth.models import User
from django.core.exceptions import SuspiciousOperation
from django.db import transaction
from django.utils import timezone
from mozilla_django_oidc.auth import OIDCAuthenticationBackend

from signin.groups import SignInRefused, check_allowed, do_sync_groups, groups_in, offboard
from signin.models import Identity
from signin.provider import endpoint, oidc_setting

USERNAME_CHARS = re.compile(r"[^\w.@+-]")


class ProviderBackend(OIDCAuthenticationBackend):
    # Django builds every backend for each permission check and each request's user:
    # no endpoint is looked up (nor the discovery document read) until a sign-in.
    def __init__(self) -> None:
        self.OIDC_RP_CLIENT_ID = settings.OIDC_RP_CLIENT_ID
        self.OIDC_RP_CLIENT_SECRET = settings.OIDC_RP_CLIENT_SECRET
        self.OIDC_RP_SIGN_ALGO = settings.OIDC_RP_SIGN_ALGO
        self.OIDC_RP_IDP_SIGN_KEY = None
        self.UserModel = User

    get_settings = staticmethod(oidc_setting)

    @property
    def OIDC_OP_TOKEN_ENDPOINT(self) -> str:
        return endpoint("OIDC_OP_TOKEN_ENDPOINT")

    @property
    def OIDC_OP_USER_ENDPOINT(self) -> str:
        return endpoint("OIDC_OP_USER_ENDPOINT")

    @property
    def OIDC_OP_JWKS_ENDPOINT(self) -> str:
        return endpoint("OIDC_OP_JWKS_ENDPOINT")

    def verify_token(self, token: str, **kwargs: Any) -> dict[str, Any]:
        payload: dict[str, Any] = super().verify_token(token, **kwargs)
        audience = payload.get("aud")
        audiences = audience if isinstance(audience, list) else [audience]
        if str(payload.get("iss", "")).rstrip("/") != settings.HARNESS_OIDC_ISSUER or self.OIDC_RP_CLIENT_ID not in audiences:
            raise SuspiciousOperation("the ID token is not from the configured issuer for this client")
        return payload

    def get_or_create_user(self, access_token: str, id_token: str, payload: dict[str, Any]) -> User:
        claims = {**self.get_userinfo(access_token, id_token, payload), **payload}
        return sign_in(claims)


def sign_in(claims: dict[str, Any]) -> User:
    """The Harness user the provider's ``claims`` (ID token over userinfo) name, with
    their groups brought up to date; SignInRefused for someone not let in."""
    subject = str(claims.get("sub", ""))
    if not subject:
        raise SuspiciousOperation("the provider named nobody (no sub claim)")
    groups = groups_in(claims, settings.HARNESS_OIDC_GROUPS_CLAIM)
    issuer = settings.HARNESS_OIDC_ISSUER
    try:
        check_allowed(groups, settings.HARNESS_OIDC_ALLOWED_GROUPS)
    except SignInRefused:
        for known in Identity.objects.select_related("user").filter(issuer=issuer, subject=subject):
            offboard(known)
        raise
    # One transaction: the identity, the user and their groups change together or not at all.
    with transaction.atomic():
        identity = Identity.objects.select_related("user").filter(issuer=issuer, subject=subject).first()
        if identity is None:
            user = User.objects.create_user(_free_username(claims, issuer, subject), email=str(claims.get("email", ""))[:254])
            identity = Identity.objects.create(user=user, issuer=issuer, subject=subject)
        user = identity.user
        if not user.is_active:
            raise SignInRefused("Your Harness account is deactivated. Ask an admin of Harness to reactivate it.")
        user.email = str(claims.get("email", user.email))[:254]
        user.first_name = str(claims.get("given_name", claims.get("name", user.first_name)))[:150]
        user.save(update_fields=["email", "first_name"])
        do_sync_groups(identity, groups)
        identity.groups = groups
        identity.last_signed_in_at = timezone.now()
        identity.save(update_fields=["groups", "last_signed_in_at"])
    return user


def _free_username(claims: dict[str, Any], issuer: str, subject: str) -> str:
    """A readable username (the username claim, else the email, else the subject),
    with a suffix from the identity when a local account has it already."""
    wanted = str(claims.get(settings.HARNESS_OIDC_USERNAME_CLAIM) or claims.get("email") or subject)
    name = USERNAME_CHARS.sub("-", wanted)[:120] or "user"
    if not User.objects.filter(username=name).exists():
        return name
    return f"{name}-{hashlib.sha256(f'{issuer} {subject}'.encode()).hexdigest()[:10]}"
