"""The permissions the server checks, by Django's name (``app_label.codename``), in
one place: the pages (pages.access), the WebSocket consumers, the API
(api.permissions), the services' own checks (runs.control, approvals.checks), the
roles (runs.roles) and the tests use these constants. Templates spell a permission
``perms.<app_label>.<codename>``; tests/test_permission_names.py holds every such
check to this list."""

from __future__ import annotations

VIEW_RUNS = "runs.view_run"
ADD_RUNS = "runs.add_run"
OPERATE_RUNS = "runs.operate_runs"  # kill a run, turn the global switch
VIEW_APPROVALS = "approvals.view_approvalrequest"
DECIDE_APPROVALS = "approvals.decide_approval"  # grant or deny
VIEW_POLICIES = "approvals.view_policyversion"
ADD_POLICIES = "approvals.add_policyversion"
VIEW_WEBHOOKS = "notifications.view_webhookendpoint"
ADD_WEBHOOKS = "notifications.add_webhookendpoint"
CHANGE_WEBHOOKS = "notifications.change_webhookendpoint"
DELETE_WEBHOOKS = "notifications.delete_webhookendpoint"
VIEW_DELIVERIES = "notifications.view_delivery"
VIEW_API_TOKENS = "api.view_apitoken"
CHANGE_API_TOKENS = "api.change_apitoken"
VIEW_AUDIT = "projects.view_auditentry"  # a project's audit page: its admins
VIEW_MEMBERS = "projects.view_membership"
CHANGE_MEMBERS = "projects.change_membership"  # add, change and remove a project's members

ALL = frozenset(
    {
        VIEW_RUNS,
        ADD_RUNS,
        OPERATE_RUNS,
        VIEW_APPROVALS,
        DECIDE_APPROVALS,
        VIEW_POLICIES,
        ADD_POLICIES,
        VIEW_WEBHOOKS,
        ADD_WEBHOOKS,
        CHANGE_WEBHOOKS,
        DELETE_WEBHOOKS,
        VIEW_DELIVERIES,
        VIEW_API_TOKENS,
        CHANGE_API_TOKENS,
        VIEW_AUDIT,
        VIEW_MEMBERS,
        CHANGE_MEMBERS,
    }
)
