"""Projects and their members in the Django admin: projects for site admins alone,
members and the audit for each project's admins too, with every
change in the project's audit (docs/design.md, Trust boundaries).

Registered here rather than in projects: a project's lists are checked with the
sandbox's rules (its remotes as the server's allowlist reads them, its sources under
the server's roots) and a project resumed or given more room moves its queue on
(runs.scheduling.queue), both above projects. Memberships change here alone (the project's page
and the memberships' own), so the audit is written where the change is saved, in its
transaction, with who made it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django import forms
from django.conf import settings
from django.contrib import admin
from django.db import transaction
from django.db.models import QuerySet
from django.forms import BaseInlineFormSet
from django.http import HttpRequest

from common.permissions import CHANGE_MEMBERS, VIEW_AUDIT, VIEW_MEMBERS
from common.row_labels import name_row_fields
from common.times import zoned_times
from core.contract import LIMIT_NAMES
from projects.admin_scope import InProjects, SiteAdminsOnly
from projects.audit import record
from projects.models import AuditEntry, Membership, Project
from runs.scheduling.queue import enqueue_dispatch
from sandbox.public import UnsafeURL, allowlist


def _strings(value: object, what: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(item, str) and item for item in value):
        raise forms.ValidationError(f"{what} must be a JSON list of non-empty strings")
    return list(value)


class ProjectForm(forms.ModelForm):
    class Meta:
        model = Project
        fields = [
            "slug",
            "name",
            "workspace_sources",
            "git_remotes",
            "max_active_runs",
            "run_limits",
            "daily_max_tokens",
            "monthly_max_tokens",
            "daily_max_cost_usd",
            "monthly_max_cost_usd",
            "reserve_tokens",
            "reserve_cost_usd",
            "paused",
        ]
        help_texts = {
            "workspace_sources": "Paths (relative to the checkout, or absolute) under HARNESS_WORKSPACE_SOURCES; empty: all of them.",
            "git_remotes": "Entries as HARNESS_GIT_ALLOWED_REMOTES' (a prefix ending in '/' or one repository URL); empty: all of them.",
            "max_active_runs": "Runs active at once; more wait in the project's queue. Empty: no cap.",
            "reserve_tokens": "Of a run's model budget, the tokens kept for verification and its report: once the rest is used, "
            "the model may only run checks and finish.",
            "reserve_cost_usd": "The same in dollars.",
        }

    def clean_workspace_sources(self) -> list[str]:
        sources = _strings(self.cleaned_data["workspace_sources"], "workspace sources")
        base = Path(settings.BASE_DIR)
        roots = [Path(root).resolve() for root in settings.WORKSPACE_SOURCES]
        for source in sources:
            path = (Path(source) if Path(source).is_absolute() else base / source).resolve()
            if not any(path.is_relative_to(root) for root in roots):
                # It would widen nothing (the server's check still applies), but it says
                # something that is not so.
                raise forms.ValidationError(f"{source} is outside the server's workspace sources (HARNESS_WORKSPACE_SOURCES)")
        return sources

    def clean_run_limits(self) -> dict[str, int]:
        raw = self.cleaned_data["run_limits"]
        if raw in (None, ""):
            return {}
        if not isinstance(raw, dict):
            raise forms.ValidationError('an object of limits, e.g. {"wall_time_seconds": 600}')
        for name, value in raw.items():
            if name not in LIMIT_NAMES:
                raise forms.ValidationError(f"{name!r} is not a limit (one of {', '.join(LIMIT_NAMES)})")
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise forms.ValidationError(f"{name} must be a whole number of at least 1, got {value!r}")
        return raw

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        for reserve, limits in (
            ("reserve_tokens", ("daily_max_tokens", "monthly_max_tokens")),
            ("reserve_cost_usd", ("daily_max_cost_usd", "monthly_max_cost_usd")),
        ):
            for limit in limits:
                if data.get(reserve) and data.get(limit) is not None and data[reserve] >= data[limit]:
                    self.add_error(reserve, f"the reserve must be less than the {limit.replace('_', ' ')} ({data[limit]})")
        return data

    def clean_git_remotes(self) -> list[str]:
        remotes = _strings(self.cleaned_data["git_remotes"], "git remotes")
        try:
            allowlist(remotes)
        except UnsafeURL as exc:
            raise forms.ValidationError(str(exc).replace("HARNESS_GIT_ALLOWED_REMOTES entry", "entry")) from None
        return remotes


# What the audit says of a project's settings: every field of its form; its switch is named apart.
AUDITED = tuple(name for name in ProjectForm.Meta.fields if name != "paused")


class AuditedMemberships(BaseInlineFormSet):
    """The project page's members; ProjectAdmin.save_formset audits what it saves."""

    def add_fields(self, form: forms.Form, index: int | None) -> None:
        super().add_fields(form, index)
        name_row_fields(form, "member", index)


class MembershipInline(admin.TabularInline):
    model = Membership
    formset = AuditedMemberships
    extra = 1
    fields = ("user", "group", "role")


def _membership(membership: Membership) -> dict[str, Any]:
    holder = {"user": membership.user.get_username()} if membership.user is not None else {"group": str(membership.group)}
    return {**holder, "role": membership.role}


def record_membership(membership: Membership, actor: Any, action: str, **more: Any) -> None:
    record(membership.project, actor, action, **_membership(membership), **more)


@admin.register(Project)
@zoned_times(Project)
class ProjectAdmin(SiteAdminsOnly, admin.ModelAdmin):
    form = ProjectForm
    inlines = [MembershipInline]
    list_display = ("slug", "name", "max_active_runs", "active_runs", "paused", "created_at")
    readonly_fields = ("active_runs",)
    search_fields = ("slug", "name")

    def save_model(self, request: HttpRequest, obj: Project, form: forms.ModelForm, change: bool) -> None:
        before = Project.objects.filter(pk=obj.pk).values(*AUDITED, "paused").first() if change else None
        with transaction.atomic():
            super().save_model(request, obj, form, change)
            if before is None:
                record(obj, request.user, "project_created", **{name: getattr(obj, name) for name in AUDITED})
                return
            changed = {name: [before[name], getattr(obj, name)] for name in AUDITED if before[name] != getattr(obj, name)}
            if changed:
                record(obj, request.user, "project_changed", **changed)
            if before["paused"] != obj.paused:
                record(obj, request.user, "project_paused" if obj.paused else "project_resumed")
            # Resumed, or given more room: its queue may move on.
            if not obj.paused and ("max_active_runs" in changed or before["paused"]):
                transaction.on_commit(lambda: enqueue_dispatch(obj.pk))

    def delete_model(self, request: HttpRequest, obj: Project) -> None:
        with transaction.atomic():
            record(None, request.user, "project_deleted", slug=obj.slug, name=obj.name)
            super().delete_model(request, obj)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Project]) -> None:
        for project in queryset:
            self.delete_model(request, project)

    def save_formset(self, request: HttpRequest, form: forms.ModelForm, formset: Any, change: bool) -> None:
        with transaction.atomic():
            # What the changed rows held before, for the audit (the formset's objects
            # already hold the new values).
            before = {
                m.pk: _membership(m) for m in Membership.objects.filter(pk__in=[f.instance.pk for f in formset.forms if f.instance.pk])
            }
            super().save_formset(request, form, formset, change)
            for membership in formset.new_objects:
                record_membership(membership, request.user, "membership_added")
            for membership, _fields in formset.changed_objects:
                record_membership(membership, request.user, "membership_changed", was=before.get(membership.pk))
            for membership in formset.deleted_objects:
                record_membership(membership, request.user, "membership_removed")


@admin.register(Membership)
@zoned_times(Membership)
class MembershipAdmin(InProjects, admin.ModelAdmin):
    """A project's admins manage its members here; site admins every project's."""

    view_permission = VIEW_MEMBERS
    change_permission = CHANGE_MEMBERS
    list_display = ("project", "user", "group", "role", "created_at")
    list_filter = (("project", admin.RelatedOnlyFieldListFilter), "role")
    fields = ("project", "user", "group", "role")

    def save_model(self, request: HttpRequest, obj: Membership, form: forms.ModelForm, change: bool) -> None:
        before = Membership.objects.filter(pk=obj.pk).select_related("project", "user", "group").first() if change else None
        with transaction.atomic():
            super().save_model(request, obj, form, change)
            if before is None:
                record_membership(obj, request.user, "membership_added")
            elif before.project_id != obj.project_id:
                # Moved to another project: it left one and joined the other.
                record_membership(before, request.user, "membership_removed")
                record_membership(obj, request.user, "membership_added")
            else:
                record_membership(obj, request.user, "membership_changed", was=_membership(before))

    def delete_model(self, request: HttpRequest, obj: Membership) -> None:
        with transaction.atomic():
            record_membership(obj, request.user, "membership_removed")
            super().delete_model(request, obj)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Membership]) -> None:
        for membership in queryset.select_related("project", "user", "group"):
            self.delete_model(request, membership)


@admin.register(AuditEntry)
@zoned_times(AuditEntry)
class AuditEntryAdmin(InProjects, admin.ModelAdmin):
    """The audit, read only: nobody edits or deletes what happened. A project's admins
    read its entries; site admins all, and those of no project (a deleted project's)."""

    view_permission = VIEW_AUDIT

    list_display = ("at", "project", "actor", "action", "detail")
    list_filter = (("project", admin.RelatedOnlyFieldListFilter), "action")
    search_fields = ("action", "actor__username")
    date_hierarchy = "at"
