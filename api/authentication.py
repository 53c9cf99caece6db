"""``Authorization: Token <token>`` against the hashed tokens of api.models."""

from __future__ import annotations

from typing import Any

from django.utils import timezone
from rest_framework import authentication, exceptions

from api.models import ApiToken
from ledger.writer import through_token
from projects.access import narrow

# How often a token's "last used" time is written (not on every request).
LAST_USED_RESOLUTION_SECONDS = 60


class HashedTokenAuthentication(authentication.TokenAuthentication):
    keyword = "Token"

    def authenticate_credentials(self, key: str) -> tuple[Any, ApiToken]:
        row = ApiToken.find(key)
        if row is None:
            raise exceptions.AuthenticationFailed("Invalid, expired or revoked token.")
        if row.password_changed:
            raise exceptions.AuthenticationFailed("The token was made before the user's password last changed; get a new one.")
        if not row.user.is_active:
            raise exceptions.AuthenticationFailed("User inactive or deleted.")
        now = timezone.now()
        if row.last_used_at is None or (now - row.last_used_at).total_seconds() > LAST_USED_RESOLUTION_SECONDS:
            ApiToken.objects.filter(pk=row.pk).update(last_used_at=now)
        if row.project_id is not None:
            # On this request's user object alone: every check of projects.access
            # (lists, objects, decisions, kills, new runs) then answers for the token.
            narrow(row.user, row.project_id, row.role)
        # What this request decides is recorded as decided through this token (ledger.writer).
        through_token(row.user, f"token {row.prefix}…", row.pk)
        return row.user, row
