"""Who may sign in and what the provider's groups give them, for the site admins, on
the admin's home: the users and groups (Django's own pages, opened to site admins,
who hold no Django permission rows), the provider's identities (read-only: the
provider is where identities and groups change) and the sign-in group mappings (what
a provider group gives at sign-in: nothing until a mapping here says so). A mapping
added, changed or removed is in the audit, with who did it."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin
from django.contrib.auth.admin import GroupAdmin, UserAdmin
from django.contrib.auth.models import Group, User
from django.db import transaction
from django.http import HttpRequest

from common.times import zoned_times
from projects.admin_scope import SiteAdminsOnly
from projects.audit import record
from signin.models import GroupMapping, Identity

admin.site.unregister(User)
admin.site.unregister(Group)


# Plain multiple selects, and the user's dates shown rather than edited: Django's
# two-box selector and split date-time fields are not labelled for assistive technology.
@admin.register(User)
@zoned_times(User)
class SiteUserAdmin(SiteAdminsOnly, UserAdmin):
    filter_horizontal = ()
    readonly_fields = ("last_login", "date_joined")
    fieldsets = (*(UserAdmin.fieldsets or ())[:-1], ("Important dates", {"fields": ("last_login_zoned", "date_joined_zoned")}))


@admin.register(Group)
class SiteGroupAdmin(SiteAdminsOnly, GroupAdmin):
    filter_horizontal = ()


@admin.register(Identity)
@zoned_times(Identity)
class IdentityAdmin(SiteAdminsOnly, admin.ModelAdmin):
    list_display = ["user", "subject", "issuer", "last_signed_in_at"]
    search_fields = ["user__username", "subject"]
    readonly_fields = ["user", "issuer", "subject", "groups", "last_signed_in_at"]

    def has_add_permission(self, request: HttpRequest, *args: Any) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class GroupMappingForm(forms.ModelForm):
    class Meta:
        model = GroupMapping
        fields = ["provider_group", "group", "project", "role"]

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        group, project, role = data.get("group"), data.get("project"), data.get("role")
        if group is not None and (project is not None or role):
            raise forms.ValidationError("Give either a Harness group, or a project and a role, not both.")
        if group is None and (project is None or not role):
            raise forms.ValidationError("Give a Harness group, or a project and a role in it.")
        return data


def _mapping(mapping: GroupMapping) -> dict[str, Any]:
    gives = {"group": mapping.group.name} if mapping.group is not None else {"role": mapping.role}
    return {"provider_group": mapping.provider_group, **gives}


@admin.register(GroupMapping)
@zoned_times(GroupMapping)
class GroupMappingAdmin(SiteAdminsOnly, admin.ModelAdmin):
    form = GroupMappingForm
    list_display = ["provider_group", "gives", "created_at"]
    search_fields = ["provider_group", "group__name", "project__slug"]
    list_select_related = ["group", "project"]

    @admin.display(description="gives at sign-in")
    def gives(self, obj: GroupMapping) -> str:
        return obj.gives()

    def save_model(self, request: HttpRequest, obj: GroupMapping, form: Any, change: bool) -> None:
        with transaction.atomic():
            super().save_model(request, obj, form, change)
            record(obj.project, request.user, "group_mapping_changed" if change else "group_mapping_added", **_mapping(obj))

    def delete_model(self, request: HttpRequest, obj: GroupMapping) -> None:
        with transaction.atomic():
            record(obj.project, request.user, "group_mapping_removed", **_mapping(obj))
            super().delete_model(request, obj)

    def delete_queryset(self, request: HttpRequest, queryset: Any) -> None:
        with transaction.atomic():
            for mapping in queryset.select_related("group", "project"):
                record(mapping.project, request.user, "group_mapping_removed", **_mapping(mapping))
            super().delete_queryset(request, queryset)
