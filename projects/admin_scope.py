"""The admin's pages of rows that belong to a project (memberships, the audit, webhook
endpoints): a project's admins see and change its rows alone, site admins all. The
answers come from ``user.has_perm`` (projects.access.ProjectBackend): without a row, "in
some project", which shows the module and its scoped list; with one, "in the row's
project", so another project's row is answered as one that does not exist."""

from __future__ import annotations

from typing import Any

from django.db import models
from django.db.models import QuerySet
from django.http import HttpRequest

from projects.access import is_site_admin, projects_with, scoped


class InProjects:
    """Mixed into a ModelAdmin before ``admin.ModelAdmin``. ``change_permission`` empty:
    read only (the audit)."""

    view_permission: str
    change_permission: str = ""
    project_field = "project_id"

    def get_queryset(self, request: HttpRequest) -> QuerySet[Any]:
        return scoped(super().get_queryset(request), request.user, self.view_permission, self.project_field)  # type: ignore[misc]

    def has_module_permission(self, request: HttpRequest) -> bool:
        return _holds(request, self.view_permission, None)

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return _holds(request, self.view_permission, obj)

    def has_add_permission(self, request: HttpRequest, *args: Any) -> bool:
        return bool(self.change_permission) and _holds(request, self.change_permission, None)

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return bool(self.change_permission) and _holds(request, self.change_permission, obj)

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return self.has_change_permission(request, obj)

    def formfield_for_foreignkey(self, db_field: models.ForeignKey[Any, Any], request: HttpRequest, **kwargs: Any) -> Any:
        if db_field.name == "project":
            # Only the projects where the user may change rows: a posted id of another
            # project is then an invalid choice. A site admin may also leave it empty
            # where the field allows (a site-wide webhook endpoint).
            kwargs["queryset"] = projects_with(request.user, self.change_permission or self.view_permission)
            kwargs["required"] = not (db_field.null and is_site_admin(request.user))
        return super().formfield_for_foreignkey(db_field, request, **kwargs)  # type: ignore[misc]


def _holds(request: HttpRequest, permission: str, obj: Any) -> bool:
    # A site admin also holds it for a row of no project (a site-wide webhook endpoint),
    # which no project's role reaches.
    return is_site_admin(request.user) or bool(request.user.has_perm(permission, obj))


class SiteAdminsOnly:
    """Projects (their settings, budgets and switches) are the site admins'."""

    def has_module_permission(self, request: HttpRequest) -> bool:
        return is_site_admin(request.user)

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return is_site_admin(request.user)

    def has_add_permission(self, request: HttpRequest, *args: Any) -> bool:
        return is_site_admin(request.user)

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return is_site_admin(request.user)

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return is_site_admin(request.user)
