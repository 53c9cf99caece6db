"""One run: the page with the latest window of its trace, older events on demand,
the live summary, the report download and full tool output."""

from __future__ import annotations

import json

from django import forms
from django.conf import settings
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import get_object_or_404, render
from django.views.decorators.http import require_GET

from common.permissions import VIEW_RUNS
from common.redact import redact_bytes
from runs.artifacts import FileArtifactStore, artifact_path
from runs.cli import full_report
from runs.models import Artifact, Event, Evidence, Receipt, Run
from runs.views.access import require
from runs.views.summary import run_summary
from runs.views.trace import artifact_refs, events_before, timeline

# Past this the output page shows the start and offers the whole file as a download.
SHOWN_OUTPUT_BYTES = 2_000_000


@require_GET
@require(VIEW_RUNS)
def run_detail(request: HttpRequest, run_id: str) -> HttpResponse:
    run = get_object_or_404(Run.objects.select_related("policy", "created_by"), pk=run_id)
    return render(request, "runs/detail.html", {"run": run, "summary": run_summary(run), **timeline(str(run.pk))})


class OlderEvents(forms.Form):
    before = forms.IntegerField(min_value=1)
    limit = forms.IntegerField(min_value=1, max_value=1000, required=False)


@require_GET
@require(VIEW_RUNS)
def run_events(request: HttpRequest, run_id: str) -> JsonResponse:
    run = get_object_or_404(Run, pk=run_id)
    form = OlderEvents(request.GET)
    if not form.is_valid():
        return JsonResponse({"error": form.errors.get_json_data()}, status=400)
    limit = form.cleaned_data["limit"] or settings.HARNESS_TRACE_WINDOW
    events = events_before(str(run.pk), form.cleaned_data["before"], limit)
    return JsonResponse({"events": events, "has_more": bool(events) and events[0]["seq"] > 1})


@require_GET
@require(VIEW_RUNS)
def run_event(request: HttpRequest, run_id: str, seq: int) -> JsonResponse:
    event = get_object_or_404(Event, run_id=run_id, seq=seq)
    return JsonResponse(event.as_dict(), json_dumps_params={"indent": 2})


@require_GET
@require(VIEW_RUNS)
def run_summary_json(request: HttpRequest, run_id: str) -> JsonResponse:
    return JsonResponse(run_summary(get_object_or_404(Run, pk=run_id)))


@require_GET
@require(VIEW_RUNS)
def run_report(request: HttpRequest, run_id: str) -> HttpResponse:
    run = get_object_or_404(Run, pk=run_id)
    response = HttpResponse(json.dumps(full_report(run), indent=2, sort_keys=True, default=str), content_type="application/json")
    response["Content-Disposition"] = f'attachment; filename="run-{run.task_id}-{run.pk}.json"'
    return response


def run_has_artifact(run: Run, ref: str) -> bool:
    """Artifacts are shared by content, so a reference is only served in the context
    of a run whose receipts or evidence name it."""
    if Evidence.objects.filter(run=run, output_ref=ref).exists():
        return True
    return any(ref in artifact_refs(body) for body in Receipt.objects.filter(run=run).values_list("body", flat=True))


@require_GET
@require(VIEW_RUNS)
def run_artifact(request: HttpRequest, run_id: str, ref: str) -> HttpResponse:
    run = get_object_or_404(Run, pk=run_id)
    try:
        artifact_path(ref)
    except ValueError:
        raise Http404("not an artifact reference") from None
    if not run_has_artifact(run, ref):
        raise PermissionDenied("this run did not produce that artifact")
    artifact = get_object_or_404(Artifact, ref=ref)
    # Tool output is stored as it came (on disk, not in the database); credentials in it
    # are masked whenever it is shown or downloaded.
    content = redact_bytes(FileArtifactStore().get(ref))
    if request.GET.get("download"):
        response = HttpResponse(content, content_type="application/octet-stream")
        response["Content-Disposition"] = f'attachment; filename="{ref[7:]}"'
        return response
    shown = content[:SHOWN_OUTPUT_BYTES].decode("utf-8", errors="replace")
    context = {
        "run": run,
        "artifact": artifact,
        "lines": shown.splitlines(),
        "cut": len(content) > SHOWN_OUTPUT_BYTES,
        # Which check produced it, with what exit code, on which revision.
        "evidence": Evidence.objects.filter(run=run, output_ref=ref).order_by("-recorded_at").first(),
    }
    return render(request, "runs/artifact.html", context)
