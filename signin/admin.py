"""Who signed in through the provider, for the site admins: read-only (the provider
is where identities and groups change)."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest

from common.times import zoned_times
from signin.models import Identity


@admin.register(Identity)
@zoned_times(Identity)
class IdentityAdmin(admin.ModelAdmin):
    list_display = ["user", "subject", "issuer", "last_signed_in_at"]
    search_fields = ["user__username", "subject"]
    readonly_fields = ["user", "issuer", "subject", "groups", "last_signed_in_at"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False
