"""Which approval requests a reviewer is mailed about, per project, and at which address
(notifications.preferences); while mail is on, who of their projects' reviewers no
mail reaches; and, where `make up` started a local mail catcher, a link to what it
received."""

from __future__ import annotations

from django.conf import settings
from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods

from common.permissions import DECIDE_APPROVALS
from notifications.models import MailPreference
from notifications.preferences import BadChoice, check_address, check_choices, choices_of, do_save_choices, unreachable_reviewers
from pages.access import require


@require_http_methods(["GET", "POST"])
@require(DECIDE_APPROVALS)
def mail_settings(request: HttpRequest) -> HttpResponse:
    error = ""
    address = getattr(request.user, "email", "")
    if request.method == "POST":
        address = request.POST.get("address", "")[:300]
        try:
            chosen, checked = check_choices(request.user, request.POST), check_address(request.POST)
        except BadChoice as exc:
            error = str(exc).capitalize() + "."
        else:
            do_save_choices(request.user, chosen, checked)
            messages.success(request, "Saved.")
            return redirect("mail-settings")
    context = {
        "rows": choices_of(request.user),
        "options": MailPreference.Choice.choices,
        "error": error,
        "address": address,
        "mail_on": settings.HARNESS_MAIL_ENABLED,
        "unreachable": unreachable_reviewers(request.user),
        "catcher_url": settings.HARNESS_MAIL_CATCHER_URL,
    }
    return render(request, "approvals/mail_settings.html", context, status=400 if error else 200)
