"""Shared output and exit codes for the run commands (run_task, resume_run, check_run_state)."""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Sequence
from typing import Any

from django.core.management.base import OutputWrapper

from core.faults import Fault
from runs.approval_flow.flow import pending_requests
from runs.models import Event, Run
from runs.runtime import advance
from runs.services import report_of

log = logging.getLogger(__name__)

EXIT_COMPLETE = 0
EXIT_STOPPED = 1
EXIT_BAD_INPUT = 2
# The command itself failed (the database went away, an unexpected error): the cause
# is one line on stderr, the run is left as it was stored, to be resumed.
EXIT_ERROR = 3
EXIT_WAITING = 10


def run_by_id(text: str) -> Run | None:
    """The run with this id, or None (also for text that is not a run id)."""
    try:
        run_id = uuid.UUID(text)
    except ValueError:
        return None
    return Run.objects.filter(pk=run_id).first()


def one_line(exc: BaseException) -> str:
    """An error named for a shell user: its kind and first line, never a traceback
    (that goes to the log at DEBUG level)."""
    log.debug("command failed", exc_info=exc)
    first = (str(exc).strip().splitlines() or [""])[0]
    return f"{type(exc).__name__}: {first[:300]}" if first else type(exc).__name__


def drive_and_report(out: OutputWrapper, err: OutputWrapper, run_id: str, as_json: bool, faults: Sequence[Fault] = ()) -> int:
    """Drive the run in this process, print its report and return the exit code;
    whatever fails is reported in one line, never as a traceback."""
    code: int | None = None
    try:
        if advance(run_id, faults) == "leased_elsewhere":
            err.write("another worker is driving this run right now")
    except Exception as exc:  # noqa: BLE001 - the command's contract: one line and an exit code
        err.write(f"the run could not be driven: {one_line(exc)} (LOG_LEVEL=DEBUG shows the traceback)")
        code = EXIT_ERROR
    try:
        run = Run.objects.get(pk=run_id)
        print_report(out, run, as_json)
    except Exception as exc:  # noqa: BLE001 - as above
        err.write(f"the run's report could not be read: {one_line(exc)}")
        return EXIT_ERROR
    return exit_code(run) if code is None else code


def exit_code(run: Run) -> int:
    if run.status == Run.Status.COMPLETE:
        return EXIT_COMPLETE
    if run.status == Run.Status.WAITING:
        return EXIT_WAITING
    return EXIT_STOPPED


def full_report(run: Run) -> dict[str, Any]:
    report = report_of(run)
    report["events"] = [event.as_dict() for event in Event.objects.filter(run=run).order_by("seq")]
    waiting = pending_requests().filter(run=run)
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
