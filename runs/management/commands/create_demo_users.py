"""Create the demo users and their projects, and print their passwords: a reviewer
and an operator of the ``demo`` project, a site admin, and a second project,
``payments``, with its own member (reviewer and operator there, nothing in ``demo``),
so a newcomer sees that each project's runs are its own, and a second reviewer there
(``treasurer``), so the payments run, started by ``payments``, has someone who may
decide it. Each has an address on the local mail catcher's domain. For trying the
dashboard locally, not for production.

With ``--keep FILE`` (`make up`), a user who exists keeps the password kept in FILE
(0600), so a second `make up` changes nothing; ``--reset`` gives everyone a new one."""

from __future__ import annotations

import json
import os
import secrets
from pathlib import Path
from typing import Any

from django.contrib.auth.models import Group, User
from django.core.management.base import BaseCommand, CommandParser
from django.db import transaction

from projects.audit import record
from projects.models import Membership, Project, Role
from runs.roles import ensure_roles

DEMO_PROJECT = ("demo", "Demo")
SECOND_PROJECT = ("payments", "Payments")
# user -> (site admin, the project and the roles held there)
DEMO_USERS: dict[str, tuple[bool, tuple[str, str] | None, tuple[Role, ...]]] = {
    "reviewer": (False, DEMO_PROJECT, (Role.REVIEWER,)),
    "operator": (False, DEMO_PROJECT, (Role.OPERATOR,)),
    "admin": (True, None, ()),
    "payments": (False, SECOND_PROJECT, (Role.REVIEWER, Role.OPERATOR)),
    "treasurer": (False, SECOND_PROJECT, (Role.REVIEWER,)),
}
# Mail to the demo users goes to the local mail catcher, which accepts any address.
MAIL_DOMAIN = "demo.harness.test"


def demo_project(slug: str, name: str) -> Project:
    project, created = Project.objects.get_or_create(slug=slug, defaults={"name": name})
    if created:
        record(project, None, "project_created", name=name, slug=slug)
    return project


class Command(BaseCommand):
    help = (
        "Create the demo users (reviewer and operator of the demo project, admin, payments of a second project) and print their passwords."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--password", help="use this password for all of them instead of random ones")
        parser.add_argument("--keep", type=Path, help="a file of the passwords given: an existing user keeps theirs")
        parser.add_argument("--reset", action="store_true", help="with --keep: new passwords for everyone")

    @transaction.atomic
    def handle(self, *args: Any, **options: Any) -> None:
        ensure_roles()
        kept_file: Path | None = options["keep"]
        kept: dict[str, str] = {}
        if kept_file is not None and kept_file.exists() and not options["reset"]:
            kept = json.loads(kept_file.read_text())
        given: dict[str, str] = {}
        for username, (site_admin, place, roles) in DEMO_USERS.items():
            user, created = User.objects.get_or_create(username=username)
            password = kept.get(username, "")
            if created or not password:
                password = options["password"] or secrets.token_urlsafe(12)
                user.set_password(password)
                state = "created" if created else "reset"
            elif user.check_password(password):
                state = "kept"
            else:
                password, state = "(changed since; not shown)", "kept"
            given[username] = kept.get(username, password) if state == "kept" else password
            if not user.email:
                user.email = f"{username}@{MAIL_DOMAIN}"
            # Admins edit policies and projects in the Django admin, which needs staff status.
            user.is_staff = site_admin
            user.save()
            # Roles are held in a project, not through the global groups (which would
            # make them the default project's too); the admin group is the site admin's.
            user.groups.set([Group.objects.get(name="admin")] if site_admin else [])
            where = "site admin: every project"
            if place is not None:
                project = demo_project(*place)
                for role in roles:
                    _membership, added = Membership.objects.get_or_create(project=project, user=user, role=role)
                    if added:
                        record(project, None, "membership_added", user=username, role=role.value)
                where = f"{', '.join(str(role.label).lower() for role in roles)} in project {project.slug}"
            self.stdout.write(f"{username:<9} password: {password}  ({where}; {state})")
        if kept_file is not None:
            with os.fdopen(os.open(kept_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as out:
                json.dump(given, out)
