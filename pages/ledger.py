"""A project's decision ledger page, for its admins (and site admins): every decision of
the project, newest first, filtered by actor, run and kind, each linking to what it
decided on; and "verify now" for site admins, which checks the whole stored chain
against its head (docs/design.md, Decision ledger). Another project's is 404, as one
that does not exist."""

from __future__ import annotations

import json
from typing import Any

from django.contrib import messages
from django.core.paginator import Paginator
from django.http import HttpRequest, HttpResponse, HttpResponseForbidden
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST

from common.permissions import VIEW_AUDIT
from ledger.export import verify_stored
from ledger.models import Entry
from pages.access import require, visible
from projects.models import Project

PAGE_SIZE = 100


@require_GET
@require(VIEW_AUDIT)
def project_ledger(request: HttpRequest, slug: str) -> HttpResponse:
    project = visible(request, Project.objects.all(), VIEW_AUDIT, project_field="pk", slug=slug)
    filters = {name: request.GET.get(name, "").strip()[:200] for name in ("actor", "run", "kind")}
    entries = Entry.objects.filter(project_id=project.pk).order_by("-project_seq")
    if filters["actor"]:
        entries = entries.filter(actor__icontains=filters["actor"])
    if filters["run"]:
        entries = entries.filter(run_id__startswith=filters["run"])
    if filters["kind"]:
        entries = entries.filter(kind__startswith=filters["kind"])
    page = Paginator(entries, PAGE_SIZE).get_page(request.GET.get("page"))
    rows = [_row(entry) for entry in page]
    kinds = sorted(set(Entry.objects.filter(project_id=project.pk).values_list("kind", flat=True).distinct()))
    return render(request, "projects/ledger.html", {"project": project, "page": page, "rows": rows, "filters": filters, "kinds": kinds})


def _row(entry: Entry) -> dict[str, Any]:
    """An entry as the page lists it, with a link to what it decided on: the approval
    request, else the run."""
    decided = json.loads(entry.decided)
    request_id = decided.get("request") or decided.get("request_id") if isinstance(decided, dict) else None
    link = ""
    if request_id:
        link = reverse("approvals:detail", args=[request_id])
    elif entry.run_id:
        link = reverse("runs:detail", args=[entry.run_id])
    return {"entry": entry, "decided": decided, "link": link}


@require_POST
def verify_now(request: HttpRequest) -> HttpResponse:
    """Check the whole stored chain now (site admins: it reads every project's entries)."""
    if not (request.user.is_authenticated and request.user.is_superuser):
        return HttpResponseForbidden("verifying the whole ledger is for site admins")
    problem = verify_stored()
    if problem is None:
        messages.success(request, "The decision ledger verifies: every digest and link holds, up to its head.")
    else:
        messages.error(request, f"The decision ledger does not verify: {problem}")
    back = request.POST.get("next", "")
    return redirect(back if back.startswith("/") and not back.startswith("//") else "/")
