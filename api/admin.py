"""API tokens in the admin: a list to see who holds which token, and revocation.
Tokens are never made or shown here (the token itself is not stored)."""

from __future__ import annotations

from django.contrib import admin, messages
from django.db import transaction
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils import timezone

from api.models import ApiToken
from common.times import zoned_times
from projects.audit import record


@admin.register(ApiToken)
@zoned_times(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):
    list_display = ["prefix", "user", "project", "role", "created_at", "expires_at", "last_used_at", "revoked_at", "state"]
    list_filter = ["revoked_at", "expires_at", "project", "role"]
    list_select_related = ["user", "project"]  # each row's state compares the user's password
    search_fields = ["user__username", "prefix"]
    # What a token may do is fixed when it is made: widening one here would be a grant nobody asked for.
    readonly_fields = ["user", "project", "role", "prefix", "created_at", "expires_at", "last_used_at", "revoked_at"]
    exclude = ["digest", "password_mark"]
    actions = ["revoke"]

    @admin.display(description="state")
    def state(self, obj: ApiToken) -> str:
        if obj.revoked_at is not None:
            return "revoked"
        if obj.password_changed:
            return "void: the password changed"
        return "usable" if obj.usable else "expired"

    @admin.action(description="Revoke the selected tokens", permissions=["change"])
    def revoke(self, request: HttpRequest, queryset: QuerySet[ApiToken]) -> None:
        with transaction.atomic():
            revoking = list(queryset.filter(revoked_at__isnull=True).select_related("user", "project"))
            count = ApiToken.objects.filter(pk__in=[row.pk for row in revoking]).update(revoked_at=timezone.now())
            for row in revoking:
                if row.project is not None:
                    # Its issue is in the project's audit; so is its end.
                    record(row.project, request.user, "token_revoked", prefix=row.prefix, role=row.role, user=str(row.user))
        self.message_user(request, f"Revoked {count} token(s).", messages.SUCCESS)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False
