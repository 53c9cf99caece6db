"""Roles are Django groups with fixed permissions. They are (re)created after every
migrate, so a fresh database always has them."""

from __future__ import annotations

from typing import Any

from django.apps import apps
from django.contrib.auth.management import create_permissions
from django.contrib.auth.models import Group, Permission

from common import permissions as p

ROLE_PERMISSIONS: dict[str, list[str]] = {
    "reviewer": [p.VIEW_RUNS, p.VIEW_APPROVALS, p.DECIDE_APPROVALS],
    "operator": [p.VIEW_RUNS, p.ADD_RUNS, p.VIEW_APPROVALS, p.OPERATE_RUNS],
    "admin": [
        p.VIEW_RUNS,
        p.ADD_RUNS,
        p.OPERATE_RUNS,
        p.VIEW_APPROVALS,
        p.DECIDE_APPROVALS,
        p.VIEW_POLICIES,
        p.ADD_POLICIES,
        p.VIEW_WEBHOOKS,
        p.ADD_WEBHOOKS,
        p.CHANGE_WEBHOOKS,
        p.DELETE_WEBHOOKS,
        p.VIEW_DELIVERIES,
        p.VIEW_API_TOKENS,
        p.CHANGE_API_TOKENS,
    ],
}


def ensure_roles(**_: Any) -> None:
    # Permissions are created app by app after migrate; make sure both apps' exist
    # whichever app's signal got here first.
    for app_config in apps.get_app_configs():
        create_permissions(app_config, verbosity=0)
    for role, names in ROLE_PERMISSIONS.items():
        group, _created = Group.objects.get_or_create(name=role)
        permissions = []
        for name in names:
            app_label, codename = name.split(".")
            permissions.append(Permission.objects.get(content_type__app_label=app_label, codename=codename))
        group.permissions.set(permissions)
