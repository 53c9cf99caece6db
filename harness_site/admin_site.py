"""The Django admin as Harness opens it: to staff, and to each project's admins, who
find there what their project holds (its policies, members, webhooks, audit) and
nothing of another's: every page scopes itself (projects.admin_scope and the apps'
admins). Django's own admits staff alone, which would make a project admin a site-wide
staff member just to edit their project's policy."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib.admin import AdminSite
from django.contrib.auth.forms import AuthenticationForm
from django.http import HttpRequest

from common.signin import LimitedAdminAuthenticationForm
from projects.access import administers_a_project


def may_enter(user: Any) -> bool:
    return bool(user.is_active and (user.is_staff or administers_a_project(user)))


class AdminSignInForm(LimitedAdminAuthenticationForm):
    def confirm_login_allowed(self, user: Any) -> None:
        AuthenticationForm.confirm_login_allowed(self, user)
        if not may_enter(user):
            raise forms.ValidationError(
                self.error_messages["invalid_login"], code="invalid_login", params={"username": self.username_field.verbose_name}
            )


class HarnessAdminSite(AdminSite):
    login_form = AdminSignInForm

    def has_permission(self, request: HttpRequest) -> bool:
        return may_enter(request.user)
