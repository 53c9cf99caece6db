"""Create (or reset) one demo user per role and print their passwords: reviewer,
operator and admin. For trying the dashboard locally, not for production."""

from __future__ import annotations

import secrets
from typing import Any

from django.contrib.auth.models import Group, User
from django.core.management.base import BaseCommand, CommandParser

from runs.roles import ROLE_PERMISSIONS, ensure_roles


class Command(BaseCommand):
    help = "Create demo users reviewer, operator and admin (one per role) and print their passwords."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--password", help="use this password for all three instead of random ones")

    def handle(self, *args: Any, **options: Any) -> None:
        ensure_roles()
        for role in ROLE_PERMISSIONS:
            password = options["password"] or secrets.token_urlsafe(12)
            user, created = User.objects.get_or_create(username=role)
            user.set_password(password)
            # Admins edit policies in the Django admin, which needs staff status.
            user.is_staff = role == "admin"
            user.save()
            user.groups.set([Group.objects.get(name=role)])
            self.stdout.write(f"{role:<9} password: {password}  ({'created' if created else 'reset'})")
