"""The operator's controls: killing one run (after a confirmation page), each project's
switch (for its operators), the global switch; and where each role lands after
signing in. The permission is checked here and again by the control services."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import messages
from django.db.models import Count, Q
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods

from common.permissions import DECIDE_APPROVALS, OPERATE_RUNS, VIEW_AUDIT
from pages.access import require, visible
from projects.access import holds_globally, projects_with, scoped
from projects.models import Project
from runs.control import ACTIVE, ControlRefused, kill, set_global, set_project_switch
from runs.models import GlobalSwitch, Run
from runs.persistence.broadcast import broadcast_lists_changed

# Each action turns one of the two switches and leaves the other as it is; the
# message says which switch and what it does now.
SWITCH_ACTIONS = {
    "stop_all": ("stop_all", True),
    "release": ("stop_all", False),
    "pause_admission": ("admit_new", False),
    "admit": ("admit_new", True),
}
SWITCH_MESSAGES = {
    "stop_all": "Stop all runs is on: new runs are refused",
    "release": "Stop all runs is released: runs may start again",
    "pause_admission": "New runs are paused: runs already going continue",
    "admit": "New runs are admitted again",
}


def home(request: HttpRequest) -> HttpResponse:
    """Where each role starts: a reviewer at the requests waiting for them."""
    if request.user.is_authenticated and request.user.has_perm(DECIDE_APPROVALS):
        return redirect("approvals:inbox")
    return redirect("runs:list")


@require_http_methods(["GET", "POST"])
@require(OPERATE_RUNS)
def kill_run(request: HttpRequest, run_id: str) -> HttpResponse:
    run = visible(request, Run.objects.all(), OPERATE_RUNS, pk=run_id)
    if request.method == "POST":
        try:
            flagged = kill(run, request.user, request.POST.get("reason", ""))
        except ControlRefused as exc:
            messages.error(request, str(exc))
        else:
            if flagged:
                messages.warning(request, f"Kill requested for {run.task_id}; the worker stops it at once.")
            else:
                messages.info(request, f"{run.task_id} is not running or a kill was already requested.")
        return redirect("runs:detail", run.pk)
    return render(request, "runs/kill_confirm.html", {"run": run, "active": run.status in ACTIVE})


class SwitchForm(forms.Form):
    action = forms.ChoiceField(choices=[(name, name) for name in SWITCH_ACTIONS])
    confirm = forms.BooleanField(required=False)

    def clean(self) -> dict[str, object]:
        data = super().clean() or {}
        if data.get("action") == "stop_all" and not data.get("confirm"):
            self.add_error("confirm", "tick the box to confirm stopping every active run")
        return data


@require_http_methods(["GET", "POST"])
@require(OPERATE_RUNS)
def global_switch(request: HttpRequest) -> HttpResponse:
    form = SwitchForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        switch = GlobalSwitch.get()
        name, value = SWITCH_ACTIONS[form.cleaned_data["action"]]
        wanted = {"stop_all": switch.stop_all, "admit_new": switch.admit_new, name: value}
        try:
            killed = set_global(request.user, **wanted)
        except ControlRefused as exc:
            messages.error(request, str(exc))
        else:
            said = SWITCH_MESSAGES[form.cleaned_data["action"]]
            # Stopping every run is a warning, never a green success.
            notice = messages.warning if form.cleaned_data["action"] == "stop_all" else messages.success
            notice(request, f"{said}; {killed} active run(s) killed." if killed else f"{said}.")
            broadcast_lists_changed("switch")
        return redirect("control")
    active = scoped(Run.objects.filter(status__in=ACTIVE), request.user, OPERATE_RUNS).order_by("-created_at")
    return render(
        request,
        "runs/control.html",
        {
            "switch": GlobalSwitch.get(),
            "form": form,
            "active": active[:50],
            "active_count": active.count(),
            "projects": operated_projects(request),
            # A project's operator sees the global switch's state, not its buttons: it is the site admins'.
            "may_global": holds_globally(request.user, OPERATE_RUNS),
        },
        status=400 if form.is_bound else 200,
    )


def operated_projects(request: HttpRequest) -> list[dict[str, Any]]:
    """The projects whose switch the user may turn, each with its active and queued runs
    and whether the user may read its audit."""
    projects = projects_with(request.user, OPERATE_RUNS).annotate(
        active=Count("runs", filter=Q(runs__status__in=ACTIVE, runs__queued=False)),
        waiting=Count("runs", filter=Q(runs__queued=True)),
    )
    return [
        {
            "slug": project.slug,
            "name": project.name,
            "paused": project.paused,
            "max_active_runs": project.max_active_runs,
            "active": project.active,
            "waiting": project.waiting,
            "can_audit": request.user.has_perm(VIEW_AUDIT, project),
        }
        for project in projects
    ]


class ProjectSwitchForm(forms.Form):
    action = forms.ChoiceField(choices=[("pause", "pause"), ("resume", "resume"), ("stop_all", "stop_all")])
    confirm = forms.BooleanField(required=False)

    def clean(self) -> dict[str, object]:
        data = super().clean() or {}
        if data.get("action") == "stop_all" and not data.get("confirm"):
            self.add_error("confirm", "tick the box to confirm stopping every active run of the project")
        return data


@require_http_methods(["POST"])
@require(OPERATE_RUNS)
def project_switch(request: HttpRequest, slug: str) -> HttpResponse:
    """A project's switch: pause or resume new runs, stop all its runs. Another
    project's is 404, as one that does not exist."""
    project = visible(request, Project.objects.all(), OPERATE_RUNS, project_field="pk", slug=slug)
    form = ProjectSwitchForm(request.POST)
    if not form.is_valid():
        for errors in form.errors.values():
            for error in errors:
                messages.error(request, f"{project.slug}: {error}")
        return redirect("control")
    action = form.cleaned_data["action"]
    try:
        killed = set_project_switch(
            request.user, project, paused={"pause": True, "resume": False}.get(action), stop_all=action == "stop_all"
        )
    except ControlRefused as exc:
        messages.error(request, str(exc))
    else:
        said = {
            "pause": f"Project {project.slug} is paused: new runs are refused, its queue holds",
            "resume": f"Project {project.slug} admits new runs again",
            "stop_all": f"Every active run of project {project.slug} is being stopped ({killed} killed)",
        }[action]
        (messages.warning if action == "stop_all" else messages.success)(request, said + ".")
        broadcast_lists_changed("switch")
    return redirect("control")
