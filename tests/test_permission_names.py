"""Permission names are spelled once (common.permissions): every name the roles grant
exists after migrate, and every ``perms.<app>.<codename>`` a template checks is one of
them, so a renamed permission cannot leave a page checking a name nothing grants."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from django.contrib.auth.models import Permission

from common import permissions
from runs.roles import ROLE_PERMISSIONS

TEMPLATES = Path(__file__).resolve().parent.parent / "templates"
TEMPLATE_CHECK = re.compile(r"\bperms\.(\w+)\.(\w+)")


def test_it_finds_the_template_checks_it_holds_to_the_list() -> None:
    checks = {f"{app}.{codename}" for path in TEMPLATES.rglob("*.html") for app, codename in TEMPLATE_CHECK.findall(path.read_text())}
    assert permissions.OPERATE_RUNS in checks  # the scan reads the templates at all
    assert checks <= permissions.ALL, f"templates check permissions common.permissions does not name: {sorted(checks - permissions.ALL)}"


def test_it_grants_only_named_permissions_in_the_roles() -> None:
    granted = {name for names in ROLE_PERMISSIONS.values() for name in names}
    assert granted <= permissions.ALL


@pytest.mark.django_db
def test_it_names_only_permissions_that_exist() -> None:
    existing = {f"{app}.{codename}" for app, codename in Permission.objects.values_list("content_type__app_label", "codename")}
    assert existing >= permissions.ALL, sorted(permissions.ALL - existing)
