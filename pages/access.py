"""Permission checks for every page and action: anonymous visitors are sent to the
sign-in page; signed-in users without the permission get 403."""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any, TypeVar

from django.contrib.auth.views import redirect_to_login
from django.core.exceptions import PermissionDenied
from django.db.models import Model, QuerySet
from django.http import HttpRequest, HttpResponseBase
from django.shortcuts import get_object_or_404

from projects.access import scoped

# HttpResponseBase: a download may be streamed (StreamingHttpResponse).
View = Callable[..., HttpResponseBase]


M = TypeVar("M", bound=Model)


def visible(request: HttpRequest, queryset: QuerySet[M], permission: str, project_field: str = "project_id", **lookup: Any) -> M:
    """The object ``lookup`` finds among those of the projects where the user holds
    ``permission``: one of another project is 404, the same answer as one that does
    not exist."""
    return get_object_or_404(scoped(queryset, request.user, permission, project_field), **lookup)


def require(permission: str) -> Callable[[View], View]:
    def decorate(view: View) -> View:
        @wraps(view)
        def wrapped(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
            if not request.user.is_authenticated:
                return redirect_to_login(request.get_full_path())
            if not request.user.has_perm(permission):
                raise PermissionDenied(f"this needs the {permission} permission")
            return view(request, *args, **kwargs)

        return wrapped

    return decorate
