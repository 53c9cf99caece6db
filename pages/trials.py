"""A trial's pages (docs/design.md, Trials): the list, the comparison (per-variant
bars with their intervals and a scatter of cost against success, drawn server-side by
trials.report, every mark linking to its runs), the static report, the exports and
stopping it. Each trial is found under its project's permission (pages.access.visible):
another project's is 404."""

from __future__ import annotations

import json

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST

from common.permissions import OPERATE_RUNS, VIEW_RUNS
from pages.access import require, visible
from projects.access import permissions_in, scoped
from trials import report
from trials.models import Trial
from trials.service import figures, progress, stop_trial, tend


@require_GET
@require(VIEW_RUNS)
def trial_list(request: HttpRequest) -> HttpResponse:
    trials = scoped(Trial.objects.select_related("project"), request.user, VIEW_RUNS).order_by("-created_at")[:200]
    return render(request, "trials/list.html", {"trials": trials})


@require_GET
@require(VIEW_RUNS)
def trial_detail(request: HttpRequest, trial_id: int) -> HttpResponse:
    trial = tend(visible(request, Trial.objects.select_related("project"), VIEW_RUNS, pk=trial_id))
    result = figures(trial)
    context = report.context(result, report.anchor, reverse("runs:list"))
    context |= {"trial": trial, "progress": progress(trial), "can_stop": OPERATE_RUNS in permissions_in(request.user, trial.project_id)}
    return render(request, "trials/detail.html", context)


@require_GET
@require(VIEW_RUNS)
def trial_report(request: HttpRequest, trial_id: int) -> HttpResponse:
    """The static report, to save and mail: runs linked at this site's address."""
    trial = tend(visible(request, Trial.objects.select_related("project"), VIEW_RUNS, pk=trial_id))
    html = report.html_report(figures(trial), request.build_absolute_uri(reverse("runs:list")))
    response = HttpResponse(html, content_type="text/html; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="trial-{trial.pk}.html"'
    return response


@require_GET
@require(VIEW_RUNS)
def trial_export(request: HttpRequest, trial_id: int) -> HttpResponse:
    trial = tend(visible(request, Trial.objects.select_related("project"), VIEW_RUNS, pk=trial_id))
    result = figures(trial)
    if request.GET.get("format") == "csv":
        response = HttpResponse(report.csv_text(result), content_type="text/csv; charset=utf-8")
        response["Content-Disposition"] = f'attachment; filename="trial-{trial.pk}.csv"'
        return response
    response = HttpResponse(json.dumps(result, indent=2), content_type="application/json")
    response["Content-Disposition"] = f'attachment; filename="trial-{trial.pk}.json"'
    return response


@require_POST
@require(VIEW_RUNS)
def trial_stop(request: HttpRequest, trial_id: int) -> HttpResponseRedirect:
    trial = visible(request, Trial.objects.select_related("project"), VIEW_RUNS, pk=trial_id)
    if OPERATE_RUNS not in permissions_in(request.user, trial.project_id):
        raise PermissionDenied("stopping a trial needs an operator of its project")
    killed = stop_trial(trial, request.user.get_username())
    messages.warning(request, f"Trial {trial.pk} stopped: {killed} runs killed.")
    return HttpResponseRedirect(reverse("trials:detail", args=[trial.pk]))
