"""Webhook endpoints and their deliveries in the Django admin. Deliveries are a
record: readable, with every attempt, never edited by hand."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin
from django.http import HttpRequest

from common.times import zoned_times
from notifications.destinations import DestinationRefused, DestinationUnresolved, check_destination
from notifications.models import Delivery, DeliveryAttempt, WebhookEndpoint


class EndpointForm(forms.ModelForm):
    url = forms.URLField(max_length=500, assume_scheme="https", help_text="receives a POST per notification")
    event_kinds = forms.MultipleChoiceField(
        choices=WebhookEndpoint.Kind.choices,
        widget=forms.CheckboxSelectMultiple,
        help_text="which kinds of notification this endpoint gets",
    )

    class Meta:
        model = WebhookEndpoint
        fields = ["name", "url", "format", "event_kinds", "secret", "active"]

    def clean_url(self) -> str:
        url = str(self.cleaned_data["url"])
        try:
            check_destination(url)
        except (DestinationRefused, DestinationUnresolved) as exc:
            raise forms.ValidationError(str(exc).capitalize() + ".", code="destination") from None
        return url


@admin.register(WebhookEndpoint)
@zoned_times(WebhookEndpoint)
class WebhookEndpointAdmin(admin.ModelAdmin):
    form = EndpointForm
    list_display = ["name", "url", "format", "kinds", "active", "created_at"]
    list_filter = ["active", "format"]

    @admin.display(description="kinds")
    def kinds(self, obj: WebhookEndpoint) -> str:
        return ", ".join(obj.event_kinds)


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
    list_filter = ["status", "kind", "endpoint"]
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

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False
