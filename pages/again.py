"""Going again from the pages: an operator re-runs an ended run, a reviewer or
operator asks again for an out-of-date request (runs.rerun). The services check the
permission and the run again; a refusal comes back in words."""

from __future__ import annotations

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.views.decorators.http import require_POST

from approvals.models import ApprovalRequest
from common.permissions import OPERATE_RUNS, VIEW_APPROVALS
from core.errors import InputError
from pages.access import require, visible
from runs.control import ControlRefused
from runs.models import Run
from runs.rerun import ask_again, rerun, rerun_policy


@require_POST
@require(OPERATE_RUNS)
def rerun_view(request: HttpRequest, run_id: str) -> HttpResponse:
    run = visible(request, Run.objects.select_related("project", "policy"), OPERATE_RUNS, pk=run_id)
    under = rerun_policy(run)
    try:
        new = rerun(run, request.user)
    except (ControlRefused, PermissionDenied) as exc:
        messages.error(request, f"Not re-run: {exc}.")
        return redirect("runs:detail", run.pk)
    except InputError as exc:
        messages.error(request, "Not re-run: " + "; ".join(str(problem) for problem in exc.problems) + ".")
        return redirect("runs:detail", run.pk)
    messages.success(request, f"Re-running {run.task_id} with the same contract under {under}.")
    return redirect("runs:detail", new.pk)


@require_POST
@require(VIEW_APPROVALS)
def ask_again_view(request: HttpRequest, request_id: str) -> HttpResponse:
    approval = visible(request, ApprovalRequest.objects.select_related("run"), VIEW_APPROVALS, "run__project_id", pk=request_id)
    try:
        ask_again(approval, request.user)
    except ControlRefused as exc:
        messages.error(request, f"Not asked again: {exc}.")
        return redirect("approvals:detail", approval.pk)
    messages.success(request, f"Asked again: {approval.run.task_id} takes {approval.tool} back through the gates and files a new request.")
    return redirect("runs:detail", approval.run_id)
