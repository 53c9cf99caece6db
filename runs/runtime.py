"""The production wiring: runs execute in the Docker sandbox under a lease, with a
watchdog for the kill switch. Celery tasks, commands, views and the API create and
continue runs through here."""

from __future__ import annotations

import logging
import os
import socket
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any

from django.conf import settings
from django.db import transaction

from approvals.policies import load_policy
from approvals.services import DjangoApprovals, cancel_open_requests
from harness_site.celery import app as celery_app
from runs import leases
from runs.control import Watchdog, admitting_new_runs, stopping_all_runs
from runs.core import events as ev
from runs.core.errors import FieldProblem, InputError
from runs.core.faults import Fault, FaultyExecutor
from runs.core.ports import RevisionMismatch
from runs.environment import Environment
from runs.models import Run
from runs.services import check_new_run, do_create_run, drive_run, registry
from runs.store import DjangoStore, LeaseLost, load_state
from sandbox.environment import check_workspace_for, sandbox_environment
from sandbox.remote import RemoteError
from sandbox.sources import WorkspaceSourceError

log = logging.getLogger(__name__)


def environment_for(run: Run, faults: Sequence[Fault] = ()) -> Environment:
    environment = sandbox_environment(run, load_policy(run.policy))
    if faults:
        tools = registry()
        environment.executor = FaultyExecutor(
            environment.executor,
            list(faults),
            environment.workspace.revision,
            lambda name: bool((spec := tools.get(name)) and spec.has_effect),
        )
    return environment


def check_admission() -> None:
    if stopping_all_runs():
        # Admitted, it would be killed at once: refused at the form instead.
        raise InputError(
            "run",
            [
                FieldProblem(
                    "(run)", "'Stop all runs' is on: a new run would be killed at once; an operator releases it on the Kill switch page"
                )
            ],
        )
    if not admitting_new_runs():
        raise InputError("run", [FieldProblem("(run)", "the global switch admits no new runs right now")])


def create_run(contract: object, proposer: object, actor: Any, *, enqueue: bool = True) -> Run:
    """Validate (the workspace source too), create the run and (by default) hand it to a
    worker; the worker that first drives it prepares its workspace (see advance)."""
    check_admission()
    new = check_new_run(contract, proposer)
    run = do_create_run(new, actor, check_workspace_for)
    if enqueue:
        run_id = str(run.pk)
        transaction.on_commit(lambda: celery_app.send_task("runs.start_run", args=[run_id]))
    return run


def record_base_revision(run: Run, revision: Callable[[], str], lease_token: int) -> None:
    """A run created without its workspace (by the web process) starts from the revision
    the worker found after preparing it; written once, under the worker's lease."""
    state = load_state(run)
    if state.base_revision:
        return
    state.base_revision = state.revision = revision()
    DjangoStore(lease_token).checkpoint(state, [])
    run.refresh_from_db()


def stop_undriven(run: Run, reason: str, message: str, lease_token: int) -> str:
    """A workspace the worker cannot prepare (found only then: a git ref that is not a
    commit, a malformed archive) or whose revision fails its verification stops the
    run, saying why, instead of leaving it running or waiting."""
    state = load_state(run)
    state.status, state.stop_reason, state.stop_message = "stopped", reason, message
    state.waiting = state.waiting_since = None  # a stopped run waits for nothing
    stop = ev.Stopped(run_id=str(run.pk), seq=0, ts=time.time(), status=reason, message=message)
    DjangoStore(lease_token).checkpoint(state, [stop])
    # Its requests leave the reviewers' queue, as with any stop.
    cancel_open_requests(str(run.pk), f"the run stopped: {reason}")
    return reason


def worker_identity() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


def advance(run_id: str, faults: Sequence[Fault] = ()) -> str:
    """Drive a run if no other worker holds it, until it waits or stops; return its
    outcome, or why it was not driven."""
    token = leases.acquire(run_id, worker_identity())
    if token is None:
        return "leased_elsewhere"
    try:
        run = Run.objects.select_related("policy").get(pk=run_id)
        if run.status in (Run.Status.COMPLETE, Run.Status.STOPPED):
            return run.outcome
        try:
            environment = environment_for(run, faults)  # prepares the workspace on first use
        except (WorkspaceSourceError, RemoteError) as exc:
            return stop_undriven(run, "workspace_error", f"the workspace could not be prepared: {exc}", token)
        try:
            record_base_revision(run, environment.workspace.revision, token)
        except RevisionMismatch as exc:
            return stop_undriven(run, "revision_mismatch", str(exc), token)
        with Watchdog(
            run_id,
            renew=lambda: leases.renew(run_id, token),
            on_kill=environment.kill,
            poll=settings.HARNESS_KILL_POLL_SECONDS,
            renew_every=settings.HARNESS_LEASE_SECONDS / 3,
        ) as watchdog:
            state = drive_run(run, environment, DjangoApprovals(run), lease_token=token, controls=watchdog)
        if state.finished or state.status == "waiting_approval":
            # An approval can take hours: no container idles meanwhile; resuming
            # starts a fresh one on the same workspace.
            environment.close()
        return state.outcome
    except LeaseLost:
        log.warning("run %s: lease taken over; this worker stopped driving it", run_id)
        return "lease_lost"
    finally:
        leases.release(run_id, token)
