"""Shared output and exit codes for the run commands (run_task, resume_run)."""

from __future__ import annotations

import json
from typing import Any

from django.core.management.base import OutputWrapper

from runs.models import Event, Run
from runs.services import report_of

EXIT_COMPLETE = 0
EXIT_STOPPED = 1
EXIT_BAD_INPUT = 2
EXIT_WAITING = 10


def exit_code(run: Run) -> int:
    if run.status == Run.Status.COMPLETE:
        return EXIT_COMPLETE
    if run.status == Run.Status.WAITING:
        return EXIT_WAITING
    return EXIT_STOPPED


def full_report(run: Run) -> dict[str, Any]:
    report = report_of(run)
    report["events"] = [event.as_dict() for event in Event.objects.filter(run=run).order_by("seq")]
    waiting = run.approval_requests.filter(status="pending").order_by("created_at")
    report["approvals_pending"] = [
        {"id": str(r.pk), "tool": r.tool, "args": r.args, "revision": r.revision, "expires_at": r.expires_at.isoformat()} for r in waiting
    ]
    return report


def print_report(out: OutputWrapper, run: Run, as_json: bool) -> None:
    report = full_report(run)
    if as_json:
        out.write(json.dumps(report, indent=None, sort_keys=True, default=str))
        return
    out.write(f"run {report['run_id']} ({report['task_id']}): {report['status']}")
    if report["message"]:
        out.write(f"  {report['message']}")
    out.write(f"  proposals {report['proposals']}, calls {report['calls']}, revision {report['revision'][:12]}")
    for event in report["events"]:
        call = f" [{event['call_id']}]" if event["call_id"] else ""
        out.write(f"  #{event['seq']:<3} {event['type']}{call}")
    for check, evidence in report["current_evidence"].items():
        verdict = "passed" if evidence["passed"] else "failed"
        out.write(f"  evidence {check}: {verdict} on {evidence['revision'][:12]}")
    for effect in report["pending"]:
        out.write(f"  PENDING {effect['tool']} ({effect['call_id']}): {effect['reason']}")
    for request in report["approvals_pending"]:
        out.write(f"  waiting for approval {request['id']}: {request['tool']} {json.dumps(request['args'])[:200]}")
