"""Which approval requests a reviewer is mailed about, per project (notifications.preferences)."""

from __future__ import annotations

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods

from common.permissions import DECIDE_APPROVALS
from notifications.models import MailPreference
from notifications.preferences import BadChoice, check_choices, choices_of, do_save_choices
from pages.access import require


@require_http_methods(["GET", "POST"])
@require(DECIDE_APPROVALS)
def mail_settings(request: HttpRequest) -> HttpResponse:
    error = ""
    if request.method == "POST":
        try:
            chosen = check_choices(request.user, request.POST)
        except BadChoice as exc:
            error = str(exc).capitalize() + "."
        else:
            do_save_choices(request.user, chosen)
            messages.success(request, "Saved.")
            return redirect("mail-settings")
    context = {"rows": choices_of(request.user), "options": MailPreference.Choice.choices, "error": error}
    return render(request, "approvals/mail_settings.html", context, status=400 if error else 200)
