"""Going again from the pages: an operator re-runs an ended run (runs.rerun). The
services check the permission and the run again; a refusal comes back in words."""

from __future__ import annotations

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.views.decorators.http import require_POST

from common.permissions import OPERATE_RUNS
from core.errors import InputError
from pages.access import require, visible
from runs.control import ControlRefused
from runs.models import Run
from runs.rerun import rerun


@require_POST
@require(OPERATE_RUNS)
def rerun_view(request: HttpRequest, run_id: str) -> HttpResponse:
    run = visible(request, Run.objects.select_related("project", "policy"), OPERATE_RUNS, pk=run_id)
    try:
        new = rerun(run, request.user)
    except (ControlRefused, PermissionDenied) as exc:
        messages.error(request, f"Not re-run: {exc}.")
        return redirect("runs:detail", run.pk)
    except InputError as exc:
        messages.error(request, "Not re-run: " + "; ".join(str(problem) for problem in exc.problems) + ".")
        return redirect("runs:detail", run.pk)
    messages.success(request, f"Re-running {run.task_id} with the same contract under policy v{run.policy.version}.")
    return redirect("runs:detail", new.pk)
