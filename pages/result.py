"""An ended run's result, the page GitHub Actions calls a job summary: how it ended in
words, what changed (files and diff), where it went (branch, change request or the
outbox patch), who approved what and when, the evidence and its revision, what was
not performed, the limitations, cost and time, and the model's own summary."""

from __future__ import annotations

from typing import Any

from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.http import require_GET

from approvals.models import ApprovalRequest
from common.permissions import VIEW_RUNS
from core import events as ev
from core.outcome import REFUSED_WORDS
from live.trace import outcome_tone, present
from live.wording import duration, human
from pages.access import require, visible
from pages.approvals import commit_times, told_changes
from pages.summary import run_summary
from runs.control import ACTIVE
from runs.models import Event, PublishedPatch, Run
from runs.outcome import told
from runs.rerun import rerun_policy
from runs.services import report_of


def final_stop(run: Run) -> ev.Stopped | None:
    """The run's last ``stopped`` event: how it ended, in the loop's words, and for a
    completed run the finish call as recorded (already masked)."""
    row = Event.objects.filter(run=run, type=ev.type_name(ev.Stopped)).order_by("-seq").first()
    stopped = row.typed() if row is not None else None
    return stopped if isinstance(stopped, ev.Stopped) else None


def finish_summary(stop: ev.Stopped | None) -> str:
    """What the model said when it finished (``finish``'s summary), or ""."""
    if stop is None or stop.status != "complete" or stop.call is None:
        return ""
    return str(stop.call.args.get("summary", ""))


def shown_request(run: Run) -> ApprovalRequest | None:
    """The request whose diff shows the run's changes as a reviewer last saw them:
    the newest that carried one (the one used, if any was)."""
    requests = ApprovalRequest.objects.filter(run=run).exclude(diff="")
    used = requests.filter(status=ApprovalRequest.Status.CONSUMED).order_by("-created_at").first()
    return used or requests.order_by("-created_at").first()


def outbox_patches(run: Run) -> list[dict[str, Any]]:
    """The patches this run published into the outbox, each a download."""
    return [
        {
            "file": patch.file,
            "size": patch.size,
            "at": patch.created_at,
            "href": reverse("runs:artifact", args=[run.pk, patch.ref]) + "?download=1",
        }
        for patch in PublishedPatch.objects.filter(run_id=str(run.pk)).order_by("created_at")
    ]


def external_effects(run: Run) -> list[dict[str, str]]:
    """The calls whose receipts say they applied an effect outside the workspace: where
    the page knows no destination for them (an executor that records none, such as the
    simulated one), it names them rather than saying nothing went anywhere."""
    rows = Event.objects.filter(run=run, type=ev.type_name(ev.ReceiptRecorded), payload__external=True).order_by("seq")
    receipts = (row.typed() for row in rows)
    return [{"call_id": str(receipt.call_id), "tool": receipt.tool} for receipt in receipts if isinstance(receipt, ev.ReceiptRecorded)]


def decisions(run: Run) -> list[dict[str, Any]]:
    """Every request the run filed: who granted (each grant, with its comment), who
    decided otherwise, and when; in the order they were filed."""
    rows = []
    for request in run.approval_requests.select_related("decided_by").prefetch_related("grants__user").order_by("created_at"):
        rows.append(
            {
                "request": request,
                "label": human(request.status),
                "grants": list(request.grants.all()),
                "href": reverse("approvals:detail", args=[request.pk]),
            }
        )
    return rows


def first_failure(run: Run) -> dict[str, Any] | None:
    """The first refused, denied or failed event of the run, in order (as the trace's
    "jump to the first failure" finds it): where a failed or partial run went wrong."""
    for row in Event.objects.filter(run=run).order_by("seq").iterator(chunk_size=500):
        shown = present(row.as_dict())
        if shown["view"]["failure"]:
            return shown
    return None


def not_performed(report: dict[str, Any]) -> list[dict[str, str]]:
    """Each call not performed, with what refused it in words (a reviewer's request
    for changes, the secret scan, a missing check) rather than a bare "failed"."""
    return [
        {**call, "why": REFUSED_WORDS.get(str(call.get("reason")), human(call.get("state")))} for call in report.get("not_performed", [])
    ]


def result_context(run: Run) -> dict[str, Any]:
    report = report_of(run)
    summary = run_summary(run)
    stop = final_stop(run)
    outcome = told(run)
    diff_request = shown_request(run)
    proposer = report.get("proposer")
    proposer = proposer if isinstance(proposer, dict) else {}
    return {
        "run": run,
        "report": report,
        # Who proposed the calls (an outside agent, named; None: Harness's own loop) and their model usage.
        "agent": summary["agent"],
        "model_usage": proposer.get("model_usage"),
        "outcome": outcome,
        "outcome_tone": outcome_tone(outcome.code),
        "root_cause": None if outcome.plain_success else first_failure(run),
        "model_summary": finish_summary(stop),
        "changed_files": report.get("changed_files", []),
        # Its context expands from what the request kept, as on the request's page.
        "diff_request": diff_request,
        "commit_times": commit_times(diff_request.effect) if diff_request is not None else [],
        # Drawn on their lines when that diff is the one the reviewer asked changes of.
        "diff_comments": told_changes(diff_request)["comments"]
        if diff_request is not None and diff_request.status == ApprovalRequest.Status.CHANGES_REQUESTED
        else [],
        "published": summary["published"],
        "outbox": outbox_patches(run),
        "external_effects": external_effects(run),
        "decisions": decisions(run),
        "requested_changes": [
            told_changes(r)
            for r in run.approval_requests.filter(status="changes_requested").select_related("decided_by").order_by("created_at")
        ],
        "evidence": summary["evidence"],
        "evidence_current": summary["evidence_current"],
        "revision": summary["revision"],
        "base_revision": summary["base_revision"],
        "not_performed": not_performed(report),
        "limitations": outcome.limitations,
        "budgets": summary["budgets"],
        "working": duration(summary["working_seconds"]),
        "waited": duration(summary["waited_seconds"]),
        "report_href": reverse("runs:report", args=[run.pk]),
        "rerun_policy": rerun_policy(run),
    }


@require_GET
@require(VIEW_RUNS)
def run_result(request: HttpRequest, run_id: str) -> HttpResponse:
    run = visible(request, Run.objects.select_related("policy", "created_by", "project"), VIEW_RUNS, pk=run_id)
    if run.status in ACTIVE:
        raise Http404("this run has not ended: its result comes when it does")
    return render(request, "runs/result.html", result_context(run))
