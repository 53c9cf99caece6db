"""Webhook endpoints and their deliveries in the Django admin. Deliveries are a
record: readable, with every attempt, never edited by hand.

A project's admins manage its endpoints and read their deliveries, and see nothing
of another project's or of the site-wide endpoints (the site admins', who see all);
every endpoint created, changed or deleted is in its project's audit."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from django import forms
from django.contrib import admin
from django.db import transaction
from django.db.models import QuerySet
from django.http import HttpRequest

from common import permissions
from common.times import zoned_times
from notifications.destinations import DestinationRefused, DestinationUnresolved, check_destination
from notifications.models import Delivery, DeliveryAttempt, Mail, MailAttempt, WebhookEndpoint
from projects.access import is_site_admin, permissions_in, project_ids_with, scoped
from projects.admin_scope import InProjects
from projects.audit import record

# What the audit says of an endpoint. Never its secret, nor its whole URL: a receiver's
# URL often is a credential itself (a Slack webhook's is), and the audit outlives it.
AUDITED = ("name", "destination", "format", "event_kinds", "active", "project_slug")


class EndpointForm(forms.ModelForm):
    url = forms.URLField(max_length=500, assume_scheme="https", help_text="receives a POST per notification")
    event_kinds = forms.MultipleChoiceField(
        choices=WebhookEndpoint.Kind.choices,
        widget=forms.CheckboxSelectMultiple,
        help_text="which kinds of notification this endpoint gets",
    )

    class Meta:
        model = WebhookEndpoint
        fields = ["name", "project", "url", "format", "event_kinds", "secret", "active"]

    def clean_url(self) -> str:
        url = str(self.cleaned_data["url"])
        try:
            check_destination(url)
        except (DestinationRefused, DestinationUnresolved) as exc:
            raise forms.ValidationError(str(exc).capitalize() + ".", code="destination") from None
        return url


def _audited(endpoint: WebhookEndpoint) -> dict[str, Any]:
    parts = urlsplit(endpoint.url)
    facts = {name: getattr(endpoint, name) for name in AUDITED if name not in ("destination", "project_slug")}
    return {**facts, "destination": f"{parts.scheme}://{parts.netloc.rpartition('@')[2]}", "project_slug": str(endpoint.project or "")}


@admin.register(WebhookEndpoint)
@zoned_times(WebhookEndpoint)
class WebhookEndpointAdmin(InProjects, admin.ModelAdmin):
    form = EndpointForm
    view_permission = permissions.VIEW_WEBHOOKS
    # One name for add, change and delete: the project admin role holds all three.
    change_permission = permissions.CHANGE_WEBHOOKS
    list_display = ["name", "project", "url", "format", "kinds", "active", "created_at"]
    list_filter = ["active", "format", ("project", admin.RelatedOnlyFieldListFilter)]
    list_select_related = ["project"]

    @admin.display(description="kinds")
    def kinds(self, obj: WebhookEndpoint) -> str:
        return ", ".join(obj.event_kinds)

    def save_model(self, request: HttpRequest, obj: WebhookEndpoint, form: forms.ModelForm, change: bool) -> None:
        before = WebhookEndpoint.objects.select_related("project").filter(pk=obj.pk).first() if change else None
        with transaction.atomic():
            super().save_model(request, obj, form, change)
            now = _audited(obj)
            if before is None:
                record(obj.project, request.user, "webhook_created", **now)
                return
            was = _audited(before)
            changed: dict[str, Any] = {name: [was[name], now[name]] for name in AUDITED if was[name] != now[name]}
            if before.secret != obj.secret:
                changed["secret"] = "replaced"  # noqa: S105 - says that it changed, never what it is
            if not changed:
                return
            if before.project_id != obj.project_id:
                # Moved: the project it left is told too.
                record(before.project, request.user, "webhook_changed", name=obj.name, **changed)
            record(obj.project, request.user, "webhook_changed", name=obj.name, **changed)

    def delete_model(self, request: HttpRequest, obj: WebhookEndpoint) -> None:
        with transaction.atomic():
            record(obj.project, request.user, "webhook_deleted", **_audited(obj))
            super().delete_model(request, obj)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[WebhookEndpoint]) -> None:
        for endpoint in queryset.select_related("project"):
            self.delete_model(request, endpoint)


@zoned_times(DeliveryAttempt)
class AttemptInline(admin.TabularInline):
    model = DeliveryAttempt
    extra = 0
    can_delete = False
    fields = readonly_fields = ("number", "at", "status_code", "duration_ms", "error")

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(Delivery)
@zoned_times(Delivery)
class DeliveryAdmin(admin.ModelAdmin):
    list_display = ["created_at", "kind", "endpoint", "status", "attempts", "status_code", "delivered_at", "next_retry_at"]
    list_filter = ["status", "kind", ("endpoint", admin.RelatedOnlyFieldListFilter)]
    search_fields = ["id", "event__run__id", "event__run__task_id"]
    list_select_related = ["endpoint"]
    inlines = [AttemptInline]
    readonly_fields = [
        "id",
        "endpoint",
        "event",
        "kind",
        "payload",
        "status",
        "attempts",
        "status_code",
        "last_error",
        "next_retry_at",
        "delivered_at",
        "created_at",
    ]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def get_queryset(self, request: HttpRequest) -> QuerySet[Delivery]:
        return scoped(super().get_queryset(request), request.user, permissions.VIEW_DELIVERIES, "endpoint__project_id")

    def has_module_permission(self, request: HttpRequest) -> bool:
        return is_site_admin(request.user) or bool(project_ids_with(request.user, permissions.VIEW_DELIVERIES))

    def has_view_permission(self, request: HttpRequest, obj: Delivery | None = None) -> bool:
        if obj is None or is_site_admin(request.user):
            return self.has_module_permission(request)
        project_id = obj.endpoint.project_id
        return project_id is not None and permissions.VIEW_DELIVERIES in permissions_in(request.user, project_id)

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@zoned_times(MailAttempt)
class MailAttemptInline(admin.TabularInline):
    model = MailAttempt
    extra = 0
    can_delete = False
    fields = readonly_fields = ("number", "at", "duration_ms", "error")

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(Mail)
@zoned_times(Mail)
class MailAdmin(admin.ModelAdmin):
    """Mails as webhook deliveries are shown: each with its attempts, never edited."""

    list_display = ["created_at", "kind", "user", "project", "status", "attempts", "delivered_at", "send_after"]
    list_filter = ["status", "kind", ("project", admin.RelatedOnlyFieldListFilter)]
    search_fields = ["user__username", "to"]
    list_select_related = ["user", "project"]
    inlines = [MailAttemptInline]
    readonly_fields = [
        "id",
        "user",
        "project",
        "kind",
        "request_ids",
        "outcome",
        "to",
        "subject",
        "body",
        "status",
        "attempts",
        "last_error",
        "send_after",
        "delivered_at",
        "created_at",
    ]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def get_queryset(self, request: HttpRequest) -> QuerySet[Mail]:
        return scoped(super().get_queryset(request), request.user, permissions.VIEW_DELIVERIES)

    def has_module_permission(self, request: HttpRequest) -> bool:
        return is_site_admin(request.user) or bool(project_ids_with(request.user, permissions.VIEW_DELIVERIES))

    def has_view_permission(self, request: HttpRequest, obj: Mail | None = None) -> bool:
        if obj is None or is_site_admin(request.user):
            return self.has_module_permission(request)
        return obj.project_id is not None and permissions.VIEW_DELIVERIES in permissions_in(request.user, obj.project_id)

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False
