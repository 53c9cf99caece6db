"""The runs list: newest first, filtered by status, outcome, owner and a search, each
filter in the URL (``?status=waiting``); a filter the page cannot apply is named."""

from __future__ import annotations

import contextlib
import uuid
from datetime import UTC, datetime
from typing import Any

from django import forms
from django.contrib.auth.models import AnonymousUser, User
from django.core.paginator import Page, Paginator
from django.db.models import Count, Q, QuerySet
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils import timezone
from django.views.decorators.http import require_GET

from common.permissions import VIEW_RUNS
from core import events as ev
from monitoring.overview import REFUSALS, runs_with_events
from pages.access import require
from projects.access import scoped
from runs.agent_runs import is_agent_run
from runs.agents.names import agent_words
from runs.approval_flow.flow import pending_requests
from runs.control import ACTIVE
from runs.models import Event, Run
from runs.project_queue import places

PAGE_SIZE = 50


# Short names a person types into the URL for a status.
STATUS_ALIASES = {"waiting": Run.Status.WAITING, "done": Run.Status.COMPLETE, "completed": Run.Status.COMPLETE}


class RunFilter(forms.Form):
    q = forms.CharField(required=False, max_length=200, label="Search")
    status = forms.CharField(required=False, max_length=40)
    outcome = forms.CharField(required=False, max_length=40)
    mine = forms.BooleanField(required=False, label="started by me")
    # What the overview's marks link to (pages/overview.py): a project, a period (of the
    # run's end, or of the event ``had`` names), queued runs, runs that had an event
    # (a wait, a refusal of ``tool``, a request to ``model``).
    project = forms.SlugField(required=False, max_length=60)
    after = forms.DateTimeField(required=False)
    before = forms.DateTimeField(required=False)
    queued = forms.BooleanField(required=False)
    had = forms.ChoiceField(required=False, choices=[("", "any"), *((t, t) for t in ("wait_ended", *REFUSALS, "model_note"))])
    tool = forms.CharField(required=False, max_length=100)
    model = forms.CharField(required=False, max_length=200)

    def clean_status(self) -> str:
        value = str(self.cleaned_data.get("status") or "").strip()
        value = STATUS_ALIASES.get(value, value)
        if value and value not in Run.Status.values:
            known = ", ".join([*Run.Status.values, *STATUS_ALIASES])
            raise forms.ValidationError(f"no status {value[:40]!r}: one of {known}")
        return value


def filter_runs(query: dict[str, Any], user: User | AnonymousUser) -> QuerySet[Run]:
    runs = scoped(Run.objects.select_related("created_by", "project"), user, VIEW_RUNS).annotate(
        # What the inbox lists: a stale request does not wait for anyone.
        waiting_approvals=Count("approval_requests", filter=Q(approval_requests__in=pending_requests()))
    )
    if text := query.get("q", "").strip():
        match = Q(task_id__icontains=text) | Q(objective__icontains=text) | Q(outcome__icontains=text)
        # A text that is not a run id searches the text fields only.
        with contextlib.suppress(ValueError):
            match |= Q(pk=uuid.UUID(text))
        runs = runs.filter(match)
    if query.get("status"):
        runs = runs.filter(status=query["status"])
    if query.get("outcome"):
        runs = runs.filter(outcome=query["outcome"])
    if query.get("mine") and user.is_authenticated:  # the page admits only signed-in users
        runs = runs.filter(created_by=user)
    if query.get("project"):
        runs = runs.filter(project__slug=query["project"])
    if query.get("queued"):
        runs = runs.filter(queued=True)
    return _in_period(runs, query).order_by("-created_at")


def _in_period(runs: QuerySet[Run], query: dict[str, Any]) -> QuerySet[Run]:
    after, before = query.get("after") or datetime.min.replace(tzinfo=UTC), query.get("before") or datetime.max.replace(tzinfo=UTC)
    if query.get("had"):
        return runs_with_events(runs, [query["had"]], after, before, tool=query.get("tool", ""), model=query.get("model", ""))
    if query.get("after") or query.get("before"):
        # An ended run changes no more: its last change is its end.
        return runs.filter(updated_at__gte=after, updated_at__lt=before)
    return runs


def agents_named(runs: list[Run]) -> dict[str, str]:
    """Each outside agent's run on the page -> its agent in words ("Claude Code 2.1.197"),
    the version its newest ``agent_started`` recorded: one query for the page."""
    agent_runs = {str(run.pk): str(run.proposer.get("preset") or "") for run in runs if is_agent_run(run)}
    versions: dict[str, str] = {}
    started = Event.objects.filter(run_id__in=list(agent_runs), type=ev.type_name(ev.AgentStarted)).order_by("seq")
    for run_id, payload in started.values_list("run_id", "payload"):
        if isinstance(payload, dict):
            versions[str(run_id)] = str(payload.get("version") or "")
    return {run_id: agent_words(preset, versions.get(run_id, "")) for run_id, preset in agent_runs.items()}


def runs_page(query: dict[str, Any], user: User | AnonymousUser, number: str | None) -> Page:
    return Paginator(filter_runs(query, user), PAGE_SIZE).get_page(number)


@require_GET
@require(VIEW_RUNS)
def run_list(request: HttpRequest) -> HttpResponse:
    form = RunFilter(request.GET)
    form.is_valid()
    # The filters that are valid apply; one that is not is named on the page.
    query = form.cleaned_data
    page = runs_page(query, request.user, request.GET.get("page"))
    # Each queued run on the page with its place in its project's queue and why it waits.
    queue = places(list(page.object_list))
    now = timezone.now()
    agents = agents_named(list(page.object_list))
    for run in page.object_list:
        run.queue_place = queue.get(str(run.pk))
        run.agent_said = agents.get(str(run.pk), "")
        # From its start to its end (or now): working and waiting together.
        run.took_seconds = ((now if run.status in ACTIVE else run.updated_at) - run.created_at).total_seconds()
    mine = scoped(Run.objects.all(), request.user, VIEW_RUNS)
    counts = dict(mine.values_list("status").annotate(n=Count("pk")))
    outcomes = mine.order_by("outcome").values_list("outcome", flat=True).distinct()
    return render(
        request,
        "runs/list.html",
        {
            "form": form,
            "status": query.get("status", ""),
            "page": page,
            "counts": counts,
            "outcomes": outcomes,
            "statuses": Run.Status.choices,
        },
    )
