"""The API asks for the same permissions as the pages: each view names the one a
method needs (named in common.permissions), so an operator's token can do what the operator's browser can,
and a token narrowed to a project and role no more than that role there."""

from __future__ import annotations

from typing import Any

from rest_framework.permissions import BasePermission
from rest_framework.request import Request

from projects.access import holds_somewhere


class MethodPermission(BasePermission):
    """``view.required_permissions`` maps an HTTP method to a permission name;
    HEAD needs what GET needs, and a method a view does not list only needs a login
    (the view then answers 405)."""

    message = "You do not have the permission this action needs."

    def has_permission(self, request: Request, view: Any) -> bool:
        user = request.user
        if not (user and user.is_authenticated):
            return False
        method = "GET" if request.method == "HEAD" else request.method
        needed = view.required_permissions.get(method)
        return needed is None or holds_somewhere(user, needed)
