"""Approval requests in the Django admin, read-only: they change through the pages
and the API, where each decision is checked and recorded. The admin for policy
versions is site_admin.policies: saving one ends the waits it makes stale, which is
runs' orchestration, above approvals."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest

from approvals.models import ApprovalRequest
from common.permissions import VIEW_APPROVALS
from common.times import zoned_times
from projects.access import scoped


@admin.register(ApprovalRequest)
@zoned_times(ApprovalRequest)
class ApprovalRequestAdmin(admin.ModelAdmin):
    list_display = ("tool", "run", "status", "created_at", "expires_at", "decided_by")
    list_filter = ("status", "tool")
    readonly_fields = [f.name for f in ApprovalRequest._meta.fields]

    def get_queryset(self, request: HttpRequest) -> Any:
        # The requests of the user's projects' runs alone, as on the reviewer pages.
        return scoped(super().get_queryset(request), request.user, VIEW_APPROVALS, "run__project_id")

    def has_module_permission(self, request: HttpRequest) -> bool:
        return self.has_view_permission(request)

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return request.user.has_perm(VIEW_APPROVALS, obj)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # requests come from runs; decisions go through the reviewer pages

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False
