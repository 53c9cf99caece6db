"""Roles are Django groups with fixed permissions. They are (re)created after every
migrate, so a fresh database always has them."""

from __future__ import annotations

from typing import Any

from django.apps import apps
from django.contrib.auth.management import create_permissions
from django.contrib.auth.models import Group, Permission

ROLE_PERMISSIONS: dict[str, list[str]] = {
    "reviewer": ["runs.view_run", "approvals.view_approvalrequest", "approvals.decide_approval"],
    "operator": ["runs.view_run", "runs.add_run", "approvals.view_approvalrequest", "runs.operate_runs"],
    "admin": [
        "runs.view_run",
        "runs.add_run",
        "runs.operate_runs",
        "approvals.view_approvalrequest",
        "approvals.decide_approval",
        "approvals.view_policyversion",
        "approvals.add_policyversion",
        "notifications.view_webhookendpoint",
        "notifications.add_webhookendpoint",
        "notifications.change_webhookendpoint",
        "notifications.delete_webhookendpoint",
        "notifications.view_delivery",
        "api.view_apitoken",
        "api.change_apitoken",
    ],
}


def ensure_roles(**_: Any) -> None:
    # Permissions are created app by app after migrate; make sure both apps' exist
    # whichever app's signal got here first.
    for app_config in apps.get_app_configs():
        create_permissions(app_config, verbosity=0)
    for role, names in ROLE_PERMISSIONS.items():
        group, _ = Group.objects.get_or_create(name=role)
        permissions = []
        for name in names:
            app_label, codename = name.split(".")
            permissions.append(Permission.objects.get(content_type__app_label=app_label, codename=codename))
        group.permissions.set(permissions)
