"""One run: the page with the latest window of its trace, older events on demand,
the live summary, the report download and full tool output."""

from __future__ import annotations

import contextlib
import json
from typing import Any

from django import forms
from django.conf import settings
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseBase, JsonResponse
from django.shortcuts import get_object_or_404, render
from django.views.decorators.http import require_GET

from common.permissions import VIEW_RUNS
from live.artifacts import run_has_artifact, stream_masked
from live.trace import events_before, timeline
from monitoring import tracing
from monitoring.spans import trace_id_text
from pages.access import require, visible
from pages.inbox import take_next
from pages.summary import run_summary
from runs.cli import full_report
from runs.models import Artifact, Event, Evidence, Receipt, Run
from runs.persistence.artifact_backends import hexdigest_of
from runs.persistence.artifacts import masked_chunks
from runs.project_queue import places
from runs.rerun import rerun_policy

# Past this the output page shows the start and offers the whole file as a download.
SHOWN_OUTPUT_BYTES = 2_000_000


@require_GET
@require(VIEW_RUNS)
def run_detail(request: HttpRequest, run_id: str) -> HttpResponse:
    run = visible(request, Run.objects.select_related("policy", "created_by", "project"), VIEW_RUNS, pk=run_id)
    # A queued run has not started: the page says where it stands in its project's queue.
    place = places([run]).get(str(run.pk)) if run.queued else None
    # The run's trace id (its UUID's 128 bits: monitoring.spans), for the company's tracing tool.
    trace_id = trace_id_text(str(run.pk)) if tracing.enabled() else None
    context = {
        "run": run,
        "queue_place": place,
        "summary": run_summary(run),
        "trace_id": trace_id,
        "next_request": take_next(request),
        "rerun_policy": rerun_policy(run),
        **timeline(str(run.pk)),
    }
    return render(request, "runs/detail.html", context)


class OlderEvents(forms.Form):
    before = forms.IntegerField(min_value=1)
    limit = forms.IntegerField(min_value=1, max_value=1000, required=False)


@require_GET
@require(VIEW_RUNS)
def run_events(request: HttpRequest, run_id: str) -> JsonResponse:
    run = visible(request, Run.objects.all(), VIEW_RUNS, pk=run_id)
    form = OlderEvents(request.GET)
    if not form.is_valid():
        return JsonResponse({"error": form.errors.get_json_data()}, status=400)
    limit = form.cleaned_data["limit"] or settings.HARNESS_TRACE_WINDOW
    events = events_before(str(run.pk), form.cleaned_data["before"], limit)
    return JsonResponse({"events": events, "has_more": bool(events) and events[0]["seq"] > 1})


@require_GET
@require(VIEW_RUNS)
def run_event(request: HttpRequest, run_id: str, seq: int) -> JsonResponse:
    event = visible(request, Event.objects.all(), VIEW_RUNS, "run__project_id", run_id=run_id, seq=seq)
    return JsonResponse(event.as_dict(), json_dumps_params={"indent": 2})


@require_GET
@require(VIEW_RUNS)
def run_summary_json(request: HttpRequest, run_id: str) -> JsonResponse:
    return JsonResponse(run_summary(visible(request, Run.objects.all(), VIEW_RUNS, pk=run_id)))


@require_GET
@require(VIEW_RUNS)
def run_report(request: HttpRequest, run_id: str) -> HttpResponse:
    run = visible(request, Run.objects.all(), VIEW_RUNS, pk=run_id)
    response = HttpResponse(json.dumps(full_report(run), indent=2, sort_keys=True, default=str), content_type="application/json")
    response["Content-Disposition"] = f'attachment; filename="run-{run.task_id}-{run.pk}.json"'
    return response


def shown_lines(ref: str) -> tuple[list[str], bool]:
    """The artifact's first ``SHOWN_OUTPUT_BYTES`` (whole lines, masked) as lines, and
    whether there is more: the page never reads the rest."""
    shown: list[bytes] = []
    size = 0
    with contextlib.closing(masked_chunks(ref)) as chunks:
        for chunk in chunks:
            shown.append(chunk)
            size += len(chunk)
            if size >= SHOWN_OUTPUT_BYTES:
                break
        more = size > SHOWN_OUTPUT_BYTES or next(chunks, None) is not None
    text = b"".join(shown)[:SHOWN_OUTPUT_BYTES].decode("utf-8", errors="replace")
    return text.splitlines(), more


def output_cut(run: Run, ref: str) -> dict[str, Any] | None:
    """What the receipt that stored ``ref`` says of a cut: the receipt, not the
    artifact's own text (which the check wrote), is the record."""
    for body in Receipt.objects.filter(run=run, body__data__output_ref=ref).values_list("body", flat=True):
        data = body.get("data") if isinstance(body, dict) else None
        if isinstance(data, dict) and data.get("output_cut") is True:
            return {"stored": data.get("output_stored_bytes"), "total": data.get("output_bytes")}
    return None


@require_GET
@require(VIEW_RUNS)
def run_artifact(request: HttpRequest, run_id: str, ref: str) -> HttpResponseBase:
    run = visible(request, Run.objects.all(), VIEW_RUNS, pk=run_id)
    try:
        hexdigest_of(ref)
    except ValueError:
        raise Http404("not an artifact reference") from None
    if not run_has_artifact(run, ref):
        raise PermissionDenied("this run did not produce that artifact")
    artifact = get_object_or_404(Artifact, ref=ref)
    # Tool output is stored as it came (runs.persistence.artifacts); credentials in it
    # are masked whenever it is shown or downloaded, a line at a time, never read whole.
    if request.GET.get("download"):
        return stream_masked(request, ref)
    lines, more = shown_lines(ref)
    context = {
        "run": run,
        "artifact": artifact,
        "lines": lines,
        "cut": more,
        "output_cut": output_cut(run, ref),
        # Which check produced it, with what exit code, on which revision.
        "evidence": Evidence.objects.filter(run=run, output_ref=ref).order_by("-recorded_at").first(),
    }
    return render(request, "runs/artifact.html", context)
