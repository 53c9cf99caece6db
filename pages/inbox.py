"""The reviewer's queue: the inbox filtered (project, tool, run) and sorted (oldest,
newest, soonest to expire, oldest run), each in the URL; and after a decision, the next
request of the same queue with how many are left."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib.auth.models import AnonymousUser, User
from django.db.models import Count, F, Q, QuerySet
from django.http import HttpRequest, QueryDict
from django.urls import reverse

from approvals.models import ApprovalRequest
from common.permissions import VIEW_APPROVALS
from projects.access import projects_with, scoped
from runs.approval_flow.flow import pending_requests

SORTS = {
    "oldest": ("created_at", "oldest request first"),
    "newest": ("-created_at", "newest request first"),
    "expiry": ("expires_at", "soonest to expire first"),
    "run": ("run__created_at", "oldest run first"),
}
# The session keeps the inbox's last query, so "next" walks the queue the reviewer chose.
QUERY_KEY = "inbox_query"
NEXT_KEY = "next_request"


class InboxFilter(forms.Form):
    project = forms.SlugField(required=False, max_length=50)
    tool = forms.CharField(required=False, max_length=100)
    run = forms.CharField(required=False, max_length=100, label="Run or task")
    sort = forms.ChoiceField(required=False, choices=[(name, label) for name, (_, label) in SORTS.items()])


def waiting_for(user: User | AnonymousUser) -> QuerySet[ApprovalRequest]:
    """What waits for a decision in the user's projects (a stale request is not among
    them: pending_requests): the one query behind every count of waiting requests (the
    header's badge, its live refresh, the inbox and its "left in your queue"), so no
    count tells how busy a project the user cannot see is."""
    return scoped(pending_requests(), user, VIEW_APPROVALS, "run__project_id")


def queue(user: User | AnonymousUser, query: QueryDict) -> tuple[InboxFilter, QuerySet[ApprovalRequest]]:
    """What waits for the user's decision (``waiting_for``), narrowed and ordered by the
    valid filters, each with its grants so far (a quorum's progress)."""
    form = InboxFilter(query)
    form.is_valid()
    wanted = form.cleaned_data
    # A trial's run says so (the trial it belongs to, trials.models.Repetition).
    rows = (
        waiting_for(user)
        .select_related("run", "run__project", "requested_by")
        .annotate(granted=Count("grants"), trial_id=F("run__trial_repetition__variant__trial_id"))
    )
    if wanted.get("project"):
        rows = rows.filter(run__project__slug=wanted["project"])
    if wanted.get("tool"):
        rows = rows.filter(tool=wanted["tool"])
    if text := (wanted.get("run") or "").strip():
        rows = rows.filter(Q(run__task_id__icontains=text) | Q(run__id__startswith=text.lower()))
    order = SORTS.get(wanted.get("sort") or "oldest", SORTS["oldest"])[0]
    return form, rows.order_by(order, "created_at")


def inbox_context(request: HttpRequest) -> dict[str, Any]:
    user = request.user
    request.session[QUERY_KEY] = request.GET.urlencode()
    form, rows = queue(user, request.GET)
    everything = waiting_for(user)
    return {
        "form": form,
        "rows": list(rows),
        "total": everything.count(),
        "projects": projects_with(user, VIEW_APPROVALS).order_by("slug"),
        "tools": everything.order_by("tool").values_list("tool", flat=True).distinct(),
        "sorts": [(name, label) for name, (_, label) in SORTS.items()],
    }


def remember_next(request: HttpRequest, decided: ApprovalRequest) -> None:
    """After a decision: the next request of the queue the reviewer last chose (and how
    many are left), for the page the decision lands on to offer."""
    _, rows = queue(request.user, QueryDict(request.session.get(QUERY_KEY, "")))
    rows = rows.exclude(pk=decided.pk)
    following = rows.first()
    request.session[NEXT_KEY] = {
        "left": rows.count(),
        "href": reverse("approvals:detail", args=[following.pk]) if following is not None else "",
        "label": f"{following.tool} for {following.run.task_id}" if following is not None else "",
    }


def take_next(request: HttpRequest) -> dict[str, Any] | None:
    """The next request remembered by the last decision, once."""
    found = request.session.pop(NEXT_KEY, None)
    return found if isinstance(found, dict) else None
