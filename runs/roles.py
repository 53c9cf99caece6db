"""Roles are Django groups with fixed permissions. They are (re)created after every
migrate, so a fresh database always has them."""

from __future__ import annotations

from typing import Any

from django.apps import apps
from django.contrib.auth.management import create_permissions
from django.contrib.auth.models import Group, Permission

from common import permissions as p
from projects.models import Role
from projects.roles import PROJECT_ROLES

# The global groups, with the permissions of the project roles of the same name (their
# members hold those roles in the default project: projects.models); the admin group,
# the site admins, also manage API tokens.
ROLE_PERMISSIONS: dict[str, list[str]] = {
    "reviewer": sorted(PROJECT_ROLES[Role.REVIEWER]),
    "operator": sorted(PROJECT_ROLES[Role.OPERATOR]),
    "admin": sorted(PROJECT_ROLES[Role.ADMIN] | {p.VIEW_API_TOKENS, p.CHANGE_API_TOKENS}),
}


def ensure_roles(**_: Any) -> None:
    # Permissions are created app by app after migrate; make sure the roles' apps'
    # exist whichever app's signal got here first (the others' come with their own).
    for label in sorted({name.split(".")[0] for names in ROLE_PERMISSIONS.values() for name in names}):
        create_permissions(apps.get_app_config(label), verbosity=0)
    for role, names in ROLE_PERMISSIONS.items():
        group, _created = Group.objects.get_or_create(name=role)
        permissions = []
        for name in names:
            app_label, codename = name.split(".")
            permissions.append(Permission.objects.get(content_type__app_label=app_label, codename=codename))
        group.permissions.set(permissions)
