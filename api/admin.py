"""API tokens in the admin: a list to see who holds which token, and revocation.
Tokens are never made or shown here (the token itself is not stored)."""

from __future__ import annotations

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest

from api.models import ApiToken, revoke_tokens
from common.times import zoned_times


@admin.register(ApiToken)
@zoned_times(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):
    list_display = ["prefix", "user", "project", "role", "created_at", "expires_at", "last_used_at", "revoked_at", "state"]
    list_filter = ["revoked_at", "expires_at", "project", "role"]
    list_select_related = ["user", "project"]  # each row's state compares the user's password
    search_fields = ["user__username", "prefix"]
    # What a token may do is fixed when it is made: widening one here would be a grant nobody asked for.
    readonly_fields = ["user", "project", "role", "prefix", "created_at", "expires_at", "last_used_at", "revoked_at", "revoked_reason"]
    exclude = ["digest", "password_mark"]
    actions = ["revoke"]

    @admin.display(description="state")
    def state(self, obj: ApiToken) -> str:
        if obj.revoked_at is not None:
            return f"revoked: {obj.revoked_reason}" if obj.revoked_reason else "revoked"
        if obj.password_changed:
            return "void: the password changed"
        return "usable" if obj.usable else "expired"

    @admin.action(description="Revoke the selected tokens", permissions=["change"])
    def revoke(self, request: HttpRequest, queryset: QuerySet[ApiToken]) -> None:
        self.message_user(request, f"Revoked {revoke_tokens(queryset, request.user)} token(s).", messages.SUCCESS)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False
