"""What each project role may do in its project, by permission name (common.permissions).

A site admin (a superuser, or a member of the ``admin`` group) keeps the global view
and the global switch; everyone else sees and acts on a project's runs only through
a role in it, held in person or through a group."""

from __future__ import annotations

from common import permissions as p
from projects.models import Role

PROJECT_ROLES: dict[str, frozenset[str]] = {
    Role.REVIEWER: frozenset({p.VIEW_RUNS, p.VIEW_APPROVALS, p.DECIDE_APPROVALS}),
    Role.OPERATOR: frozenset({p.VIEW_RUNS, p.ADD_RUNS, p.OPERATE_RUNS, p.VIEW_APPROVALS}),
    Role.ADMIN: frozenset(
        {
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
            p.VIEW_AUDIT,
            p.VIEW_MEMBERS,
            p.CHANGE_MEMBERS,
        }
    ),
}
SITE_ADMIN_GROUP = "admin"
