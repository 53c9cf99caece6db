"""API tokens, kept as hashes: a database backup (or anyone reading it) gets no usable
token. A token is shown once, when it is made; it expires, and an admin can revoke it.

The tokens are 32 random bytes, so a single SHA-256 is as strong as a slow password
hash would be (nothing to guess) and keeps each request's check cheap. The first
characters (``prefix``) are stored as they are, to find the row and to let people tell
their tokens apart in the admin.

A token also keeps a mark of its user's password hash as it was when the token was
made: a password change (the admin, ``changepassword``, a reset, anything that writes
the hash) voids every token made before it, as it signs out the user's sessions. Like
a session, a token does not survive Django upgrading the hash on the next sign-in.

A token may be narrowed to one project and one role: it then acts only there, with
no more than that role's permissions, however much its user holds (projects.access
``narrow``, applied by api.authentication)."""

from __future__ import annotations

import hashlib
import hmac
import secrets
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import models, transaction
from django.db.models import QuerySet
from django.utils import timezone

from projects.access import permissions_in
from projects.audit import record
from projects.models import Project, Role
from projects.roles import PROJECT_ROLES

PREFIX_CHARS = 10


def digest_of(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def password_mark(user: models.Model) -> str:
    """A digest of the user's password hash. No key is needed: the hash it is made of
    sits in the same database, and it carries its own salt."""
    return hashlib.sha256(str(getattr(user, "password", "")).encode()).hexdigest()


class ApiTokenQuerySet(models.QuerySet["ApiToken"]):
    def usable(self) -> ApiTokenQuerySet:
        return self.filter(revoked_at__isnull=True, expires_at__gt=timezone.now())


class ApiToken(models.Model):
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens")
    prefix = models.CharField(max_length=PREFIX_CHARS, db_index=True, help_text="the token's first characters")
    digest = models.CharField(max_length=64, unique=True, help_text="SHA-256 of the token; the token itself is not kept")
    created_at = models.DateTimeField(default=timezone.now)
    expires_at = models.DateTimeField()
    revoked_at = models.DateTimeField(null=True, blank=True)
    # Why, when it was not its holder's own doing (shown on their token list).
    revoked_reason = models.CharField(max_length=200, blank=True, default="")
    last_used_at = models.DateTimeField(null=True, blank=True)
    password_mark = models.CharField(max_length=64, help_text="a digest of the user's password hash when the token was made")
    # CASCADE, not SET_NULL: a narrowed token whose project went must not wake up unnarrowed.
    project = models.ForeignKey(
        Project,
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="api_tokens",
        help_text="if set, the token acts only in this project",
    )
    role = models.CharField(
        max_length=20, choices=Role.choices, blank=True, default="", help_text="with a project: the most the token may do there"
    )

    objects = ApiTokenQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at"]
        verbose_name = "API token"
        constraints = [
            models.CheckConstraint(
                condition=models.Q(project__isnull=True, role="") | (models.Q(project__isnull=False) & ~models.Q(role="")),
                name="apitoken_project_and_role_together",
            ),
        ]

    def __str__(self) -> str:
        narrowed = f", {self.role} in {self.project}" if self.project_id is not None else ""
        return f"{self.prefix}… ({self.user}{narrowed})"

    @classmethod
    def issue(cls, user: models.Model, project: Project | None = None, role: str = "") -> tuple[ApiToken, str]:
        """A new token for ``user``: the row, and the token itself (shown once);
        narrowed to ``project`` and ``role`` when given (both or neither)."""
        if (project is None) != (not role):
            raise ValueError("a token is narrowed to a project and a role together")
        token = secrets.token_hex(32)
        with transaction.atomic():
            row = cls.objects.create(
                user_id=user.pk,
                prefix=token[:PREFIX_CHARS],
                digest=digest_of(token),
                password_mark=password_mark(user),
                expires_at=timezone.now() + timedelta(days=settings.HARNESS_API_TOKEN_DAYS),
                project=project,
                role=role,
            )
            if project is not None:
                # A way into the project: its admins see who holds one, in its audit.
                record(project, user, "token_issued", prefix=row.prefix, role=role, user=str(user))
        return row, token

    @classmethod
    def find(cls, token: str) -> ApiToken | None:
        """The usable (unexpired, unrevoked) row for ``token``, or None."""
        digest = digest_of(token)
        for row in cls.objects.usable().select_related("user").filter(prefix=token[:PREFIX_CHARS]):
            if hmac.compare_digest(row.digest, digest):
                return row
        return None

    @property
    def password_changed(self) -> bool:
        """Whether the user's password changed since the token was made (it is void)."""
        return not hmac.compare_digest(self.password_mark, password_mark(self.user))

    @property
    def usable(self) -> bool:
        return self.revoked_at is None and self.expires_at > timezone.now() and not self.password_changed


class NarrowingRefused(Exception):
    """A narrowing the user may not have: not a wrong password, so the sign-in
    throttle does not count it."""

    def __init__(self, errors: dict[str, list[str]]) -> None:
        super().__init__(errors)
        self.errors = errors


def check_narrowing(user: Any, slug: str | None, role: str | None) -> Project | None:
    """The project a new token of ``user`` is narrowed to (None: not narrowed), refusing
    one where the user does not hold ``role``."""
    if slug is None or role is None:
        return None
    project = Project.objects.filter(slug=slug).first()
    # The same answer whether the project exists or not: a token is no way to learn
    # another team's project names.
    if project is None or not PROJECT_ROLES[role] <= permissions_in(user, project.pk):
        raise NarrowingRefused({"project": [f"You do not hold the {role} role in a project named {slug!r}."]})
    return project


def revoke_tokens(tokens: QuerySet[ApiToken], actor: Any, reason: str = "") -> int:
    """Revoke the usable ones among ``tokens`` (saying ``reason`` on their holder's
    list); how many were. A narrowed token's end is in its project's audit, as its issue is."""
    with transaction.atomic():
        revoking = list(tokens.filter(revoked_at__isnull=True).select_related("user", "project"))
        count = ApiToken.objects.filter(pk__in=[row.pk for row in revoking]).update(revoked_at=timezone.now(), revoked_reason=reason)
        for row in revoking:
            if row.project is not None:
                said = {"reason": reason} if reason else {}
                record(row.project, actor, "token_revoked", prefix=row.prefix, role=row.role, user=str(row.user), **said)
    return count


def revoke_when_offboarded(sender: Any, user: Any, reason: str, **_: Any) -> int:
    """Receiver of ``common.offboarding.offboarded``: the person's tokens end with them."""
    return revoke_tokens(ApiToken.objects.filter(user_id=user.pk), None, reason)
