"""A project's audit page, for its admins (and site admins): who changed its members,
settings and switches, and when. Another project's is 404, as one that does not exist."""

from __future__ import annotations

from django.core.paginator import Paginator
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from common.permissions import VIEW_AUDIT
from pages.access import require, visible
from projects.models import Project

PAGE_SIZE = 100


@require_GET
@require(VIEW_AUDIT)
def audit(request: HttpRequest, slug: str) -> HttpResponse:
    project = visible(request, Project.objects.all(), VIEW_AUDIT, project_field="pk", slug=slug)
    entries = project.audit.select_related("actor").order_by("-at", "-pk")
    page = Paginator(entries, PAGE_SIZE).get_page(request.GET.get("page"))
    return render(request, "projects/audit.html", {"project": project, "page": page})
