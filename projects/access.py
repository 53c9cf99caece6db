"""Who may do what in which project, on the server: the permissions a user holds in a
project (through roles held in person or through groups), the projects where a user
holds a permission (to scope every list), and the authentication backend that answers
``user.has_perm(permission, obj)`` for an object of a project.

An object outside the user's projects is answered as if it did not exist (the views
turn a refusal for an object into 404): the same answer for a run that exists as for
one that does not.

A user object may be narrowed (``narrow``: an API token's project and role): every
answer here then holds for that project alone, with no more than the role's
permissions, and the user is no site admin and no global holder, whatever they hold."""

from __future__ import annotations

from typing import Any, TypeVar

from django.contrib.auth.backends import BaseBackend, ModelBackend
from django.core.exceptions import PermissionDenied
from django.db.models import Model, Q, QuerySet

from common.permissions import ADD_RUNS, CHANGE_MEMBERS
from core.errors import FieldProblem, InputError
from projects.models import DEFAULT_PROJECT, Membership, Project, Role
from projects.roles import PROJECT_ROLES, SITE_ADMIN_GROUP

M = TypeVar("M", bound=Model)
# Per user object (so per request): project id -> the permissions held there.
_CACHE = "_harness_project_permissions"
# Per user object: (project id, role) when it acts through a narrowed token.
_NARROWED = "_harness_narrowed_to"
_EVERYTHING = frozenset(name for names in PROJECT_ROLES.values() for name in names)


def narrow(user: Any, project_id: int, role: str) -> None:
    """Make ``user`` (this object, for this request) act only in the project, with at
    most the role's permissions."""
    if role not in PROJECT_ROLES:
        raise ValueError(f"no such role {role!r}")
    setattr(user, _NARROWED, (project_id, role))
    forget(user)


def narrowed_to(user: Any) -> int | None:
    """The project a narrowed user acts in; None when not narrowed."""
    narrowed: tuple[int, str] | None = getattr(user, _NARROWED, None)
    return narrowed[0] if narrowed is not None else None


def _site_admin(user: Any) -> bool:
    if not getattr(user, "is_authenticated", False) or not getattr(user, "is_active", False):
        return False
    return bool(user.is_superuser) or user.groups.filter(name=SITE_ADMIN_GROUP).exists()


def is_site_admin(user: Any) -> bool:
    # A narrowed token of a site admin acts in its one project, as its role there.
    return narrowed_to(user) is None and _site_admin(user)


def _held(user: Any) -> dict[int, frozenset[str]]:
    cached: dict[int, frozenset[str]] | None = getattr(user, _CACHE, None)
    if cached is not None:
        return cached
    held: dict[int, set[str]] = {}
    if getattr(user, "is_authenticated", False) and getattr(user, "is_active", False):
        mine = Membership.objects.filter(Q(user=user) | Q(group__in=user.groups.all())).values_list("project_id", "role")
        for project_id, role in mine:
            held.setdefault(project_id, set()).update(PROJECT_ROLES[role])
    frozen = {project_id: frozenset(names) for project_id, names in held.items()}
    narrowed: tuple[int, str] | None = getattr(user, _NARROWED, None)
    if narrowed is not None:
        project_id, role = narrowed
        there = _EVERYTHING if _site_admin(user) else frozen.get(project_id, frozenset())
        frozen = {project_id: there & PROJECT_ROLES[role]}
    setattr(user, _CACHE, frozen)
    return frozen


def forget(user: Any) -> None:
    """Drop what ``user`` was found to hold (after a change of membership, for a long-lived
    object such as a socket's user)."""
    if hasattr(user, _CACHE):
        delattr(user, _CACHE)


def holds_globally(user: Any, permission: str) -> bool:
    """A site admin, or a holder of ``permission`` through a global role (what the
    global switch asks: a project's role reaches no further than its project, nor
    does a narrowed token)."""
    if narrowed_to(user) is not None:
        return False
    return is_site_admin(user) or ModelBackend().has_perm(user, permission)


def permissions_in(user: Any, project_id: int | None) -> frozenset[str]:
    """What ``user`` may do in the project (nothing in none, unless a site admin)."""
    if is_site_admin(user):
        return _EVERYTHING
    return _held(user).get(project_id, frozenset()) if project_id is not None else frozenset()


def holds_somewhere(user: Any, permission: str) -> bool:
    """Whether ``user`` may ``permission`` anywhere: ``user.has_perm(permission)``, except
    that a narrowed user holds only what its project and role leave it (Django's
    superuser shortcut and global groups would answer past the narrowing)."""
    project_id = narrowed_to(user)
    if project_id is None:
        return bool(user.has_perm(permission))
    return permission in permissions_in(user, project_id)


def project_ids_with(user: Any, permission: str) -> list[int] | None:
    """The projects where ``user`` holds ``permission``; None for a site admin (all)."""
    if is_site_admin(user):
        return None
    return [project_id for project_id, names in _held(user).items() if permission in names]


def administers_a_project(user: Any) -> bool:
    """A site admin, or a project admin somewhere: who may enter the admin."""
    ids = project_ids_with(user, CHANGE_MEMBERS)
    return ids is None or bool(ids)


def scoped(queryset: QuerySet[M], user: Any, permission: str, project_field: str = "project_id") -> QuerySet[M]:
    """``queryset`` narrowed to the objects of the projects where ``user`` holds ``permission``."""
    ids = project_ids_with(user, permission)
    return queryset if ids is None else queryset.filter(**{f"{project_field}__in": ids})


def projects_with(user: Any, permission: str) -> QuerySet[Project]:
    return scoped(Project.objects.all(), user, permission, project_field="pk")


def project_of(obj: object) -> int | None:
    """The project an object belongs to: a project, or anything with a ``project_id``
    (a run, a policy version) or a ``run`` (an approval request)."""
    if isinstance(obj, Project):
        return obj.pk
    project_id = getattr(obj, "project_id", None)
    if project_id is None and (run := getattr(obj, "run", None)) is not None:
        project_id = getattr(run, "project_id", None)
    return project_id if isinstance(project_id, int) else None


class ProjectBackend(BaseBackend):
    """``has_perm(permission)``: held in some project (a page that lists what the user
    may see); ``has_perm(permission, obj)``: held in ``obj``'s project."""

    def has_perm(self, user_obj: Any, perm: str, obj: Any = None) -> bool:
        if obj is None:
            return is_site_admin(user_obj) or any(perm in names for names in _held(user_obj).values())
        project_id = project_of(obj)
        return project_id is not None and perm in permissions_in(user_obj, project_id)


def default_start_slug(user: Any) -> str:
    """Where a new run goes when its starter names no project: the only project where
    they may start runs, or the default project when there are several (or none, or
    the starter is the server's own command line)."""
    ids = project_ids_with(user, ADD_RUNS) if getattr(user, "is_authenticated", False) else None
    if ids is not None and len(ids) == 1:
        return Project.objects.values_list("slug", flat=True).get(pk=ids[0])
    return DEFAULT_PROJECT


def check_start_project(user: Any, slug: str | None) -> Project:
    """The project a new run starts in (``slug``, or ``default_start_slug``), refusing
    one where ``user`` may not start runs with PermissionDenied: the same answer for a
    project that exists as for one that does not, unless the user is a site admin (who
    sees every project) or no person (the command line), told there is no such project."""
    name = slug or default_start_slug(user)
    project = Project.objects.filter(slug=name).first()
    person = getattr(user, "is_authenticated", False)
    if person and not is_site_admin(user) and (project is None or ADD_RUNS not in permissions_in(user, project.pk)):
        raise PermissionDenied(f"you may not start runs in project {name!r}")
    if project is None:
        raise InputError("project", [FieldProblem("project", f"no project named {name!r}")])
    return project


def roles_shown(user: Any) -> str:
    """What the page header says the user holds: "site admin", or each project's roles
    ("reviewer, operator in demo; reviewer in payments"); "" for none."""
    if is_site_admin(user):
        return "site admin"
    if not getattr(user, "is_authenticated", False):
        return ""
    held: dict[str, set[str]] = {}
    mine = Membership.objects.filter(Q(user=user) | Q(group__in=user.groups.all())).values_list("project__slug", "role")
    for slug, role in mine:
        held.setdefault(slug, set()).add(str(Role(role).label).lower())
    return "; ".join(f"{', '.join(sorted(roles))} in {slug}" for slug, roles in sorted(held.items()))
