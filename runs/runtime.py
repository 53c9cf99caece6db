"""The composition root: the one module that wires the core (core) to Django,
the Docker sandbox, approvals and Celery. Runs execute in the sandbox under a lease,
with a watchdog for the kill switch; each run's workspace lives under
``WORKSPACE_ROOT/<run_id>/`` of the host that drives it (prepared, kept or rebuilt
there: runs.placement) and its container takes its limits from the run's policy,
never from the model. Celery tasks, commands, views and the API create and continue
runs through here.

The line with runs.services: services are the plain functions over a run that take
their parts as arguments (an Environment, an ApprovalGate, a workspace check) and
never name the sandbox or Celery; this module chooses the production parts and hands
them in (tests hand in their own)."""

from __future__ import annotations

import logging
import os
import socket
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import transaction

from approvals.policies import load_policy
from common.secret_scan import SecretScanner
from core import events as ev
from core.contract import WorkspaceSource
from core.environment import Environment
from core.errors import FieldProblem, InputError
from core.faults import Fault, FaultyExecutor
from core.fences import Lease
from core.fold import apply
from core.outcome import said_at_stop
from core.policy import Policy
from core.ports import RevisionMismatch
from core.storable import escaped_text
from projects.access import check_start_project
from projects.models import Project, default_project_id
from runs import invariants, placement
from runs import project_queue as admission
from runs.approval_flow.base_moves import base_branch
from runs.approval_flow.flow import cancel_open_requests
from runs.approval_flow.gate import DjangoApprovals
from runs.control import Watchdog, admitting_new_runs, kill_requested, killed_by, stopping_all_runs
from runs.mcp_servers import mcp_tools_for
from runs.models import Run
from runs.persistence.artifacts import ArtifactStorage, line_secrets
from runs.persistence.eventlog import append_events
from runs.persistence.live_output import LiveOutput
from runs.persistence.outbox import DatabaseOutbox
from runs.persistence.store import DjangoStore, LeaseLost, Unstorable, load_state
from runs.scheduling import hosts, leases, queue
from runs.scheduling.queue import enqueue_dispatch, enqueue_start
from runs.services import CurrentPolicy, NewRun, check_new_run, do_create_run, drive_run, registry
from sandbox.public import (
    HEX_REF,
    MB,
    ChangeRequests,
    ContainerSpec,
    DiskQuota,
    ForgeAccess,
    RebuildFailed,
    RemoteAccess,
    RemoteError,
    RemoteTarget,
    ReviewLimits,
    RunWorkspace,
    SandboxExecutor,
    ToolSettings,
    WorkspaceSourceError,
    check_narrowed,
    check_source,
    remember_pushes,
)

log = logging.getLogger(__name__)


workspace_root = placement.workspace_root


def check_project_source(run: Run, source: WorkspaceSource) -> None:
    """The run's project's own sources and remotes, a narrowing of the server's."""
    project = run.project
    check_narrowed(source, Path(settings.BASE_DIR), project.workspace_sources, project.git_remotes, project.slug)


def workspace_for(run: Run) -> RunWorkspace:
    """The run's workspace on this host's disk, prepared from its contract's source on
    first use (a driver gets it through ``placement.place``, which also rebuilds); the
    project's lists are checked first (``check_project_source``)."""
    check_project_source(run, WorkspaceSource.model_validate(run.contract["workspace"]))
    return placement.prepare(run)


def remote_target(run: Run, workspace: RunWorkspace) -> RemoteTarget | None:
    """Where publish pushes, for a workspace cloned from a git remote: a branch fixed
    per run (``harness/<task_id>-<run id prefix>``), on the commit it was cloned at."""
    source = workspace.source
    if not isinstance(source.get("url"), str):
        return None
    run_id = str(run.pk)
    return RemoteTarget(
        url=str(source["url"]),
        base=str(source["commit"]),
        branch=f"harness/{run.contract['task_id']}-{run_id[:8]}",
        git_dir=workspace.remote_git,
        access=RemoteAccess.from_settings(settings),
    )


def change_requests(run: Run, target: RemoteTarget | None) -> ChangeRequests | None:
    """Where open_change_request opens, for a run that pushes to a remote on a server
    with a forge: from the run's branch into the branch it was cloned from (the
    forge's default branch for a run cloned at a commit or at the default)."""
    access = ForgeAccess.from_settings(settings)
    if target is None or access is None:
        return None
    ref = run.contract["workspace"].get("ref")
    into = ref if isinstance(ref, str) and not HEX_REF.match(ref) else None
    return ChangeRequests(access, access.project_of(target.url), target.branch, into)


def tool_settings(run: Run, policy: Policy, target: RemoteTarget | None) -> ToolSettings:
    """What the run's tools may do and reach, for the whole run: the contract's write
    paths, the policy's disk limit and moved-base rule, the server's limits and secret
    scan, and where publish pushes (``target``) and opens its change request."""
    return ToolSettings(
        write_paths=tuple(run.contract["allowed_write_paths"]),
        spool_dir=Path(settings.SPOOL_DIR),
        quota=DiskQuota(
            workspace_max_bytes=policy.sandbox.workspace_max_mb * MB,
            reserve_bytes=settings.HARNESS_DISK_RESERVE_MB * MB,
            output_max_bytes=settings.HARNESS_CHECK_OUTPUT_MAX_MB * MB,
            run_artifacts_max_bytes=settings.HARNESS_RUN_ARTIFACTS_MAX_MB * MB,
        ),
        remote=target,
        forge=change_requests(run, target),
        review_limits=ReviewLimits(settings.HARNESS_REVIEW_DIFF_MAX_BYTES, settings.HARNESS_REVIEW_DIFF_MAX_LINES),
        scanner=SecretScanner(values=line_secrets(), key=settings.SECRET_KEY.encode()),
        base_branch=base_branch(run.contract),
        moved_base=policy.publish_checks.moved_base,
        egress_max_events=settings.HARNESS_EGRESS_MAX_EVENTS_PER_CALL,
    )


def prepare_workspace_for(run: Run) -> str:
    """For ``do_create_run(..., revision_of=...)``: prepare and return the revision."""
    return workspace_for(run).revision()


def check_workspace_for(run: Run) -> str:
    """For ``do_create_run(..., revision_of=...)`` in a process that must not prepare
    workspaces (the web server: preparing hands the files to the sandbox's uid, which
    needs root). Refuses a bad source now; the revision is "" until the worker that
    first drives the run prepares the workspace (runs.runtime.advance)."""
    source = WorkspaceSource.model_validate(run.contract["workspace"])
    check_source(source, Path(settings.BASE_DIR), settings.WORKSPACE_SOURCES, settings.GIT_ALLOWED_REMOTES)
    check_project_source(run, source)
    return ""


def notify(run_id: str, event: ev.Event, lease: Lease) -> None:
    """The events of a wait for the sandbox's engine, written to the run's log as the
    wait goes on (the executor's ``notify``). The executor works for the worker driving
    the run, so its lease fences them: once taken over, it writes nothing more."""
    append_events(run_id, [event], fence=lease)


def sandbox_environment(run: Run, policy: Policy, lease: Lease) -> Environment:
    # The project's lists are checked again at every pickup: a project narrowed since
    # the run was created stops it (workspace_error) rather than let it clone or push
    # where the project no longer allows.
    check_project_source(run, WorkspaceSource.model_validate(run.contract["workspace"]))
    placed = placement.place(run, lease.token)
    workspace = placed.workspace
    run_id = str(run.pk)
    spec = ContainerSpec.from_limits(policy.sandbox, str(settings.SANDBOX_IMAGE))
    target = remote_target(run, workspace)
    mcp = mcp_tools_for(run.project_id or default_project_id())
    executor = SandboxExecutor(
        run_id,
        workspace,
        None,
        ArtifactStorage(run_id),
        DatabaseOutbox(),
        tool_settings(run, policy, target),
        spec=spec,
        scope=settings.SANDBOX_SCOPE,
        engine_wait_seconds=settings.SANDBOX_ENGINE_WAIT_SECONDS,
        notify=lambda event: notify(run_id, event, lease),
        live_output=lambda call_id: LiveOutput(run_id, call_id),
        mcp=mcp,
    )
    if placed.rebuilt:
        # A publish the run's last host started is looked up here as it would have been there.
        remember_pushes(executor.context, placement.fixed_pushes(run))
    # While the run's pickup reads the workspace (Harness.run; a full walk unless this
    # worker has just made it) and its first step asks the model: if the pickup
    # fails, the run stops and closing its environment removes the container.
    executor.start_container()
    return Environment(
        executor=executor,
        workspace=executor,
        close=executor.close,
        kill=executor.kill,
        repository=workspace.repository_context,
        # Effectful unless the project's policy in force says read-only (core.mcp).
        tools=mcp.discover(CurrentPolicy(run.project_id).current().read_only_tools),
    )


def environment_for(run: Run, lease: Lease, faults: Sequence[Fault] = ()) -> Environment:
    environment = sandbox_environment(run, load_policy(run.policy), lease)
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


def check_run(contract: object, proposer: object, actor: Any, *, project: str | None = None) -> tuple[Project, NewRun]:
    """Everything ``create_run`` checks, without creating anything: where the run
    would start and the run as checked there."""
    place = check_start_project(actor, project)
    check_admission()
    if place.paused:
        # The project's own switch: its operators paused it (runs.control).
        raise InputError("run", [FieldProblem("(run)", f"project {place.slug} is paused: its operators admit no new runs right now")])
    return place, check_new_run(contract, proposer, place.pk, known_script_tools=True)


def create_run(contract: object, proposer: object, actor: Any, *, project: str | None = None, enqueue: bool = True) -> Run:
    """Validate (the project, the switches, the workspace source too), create the run
    in ``project`` (a slug; by default the only project where ``actor`` may start
    runs, else the default project) and (by default) hand it to a worker; the worker
    that first drives it prepares its workspace (see advance)."""
    place, new = check_run(contract, proposer, actor, project=project)
    run = do_create_run(new, actor, check_workspace_for, project_id=place.pk)
    admitted = admission.admit_new(run)
    if enqueue:
        run_id = str(run.pk)
        # Queued, it starts when its project's queue reaches it (runs.project_queue); a
        # dispatch now admits it if a slot is free after all (one freed meanwhile).
        transaction.on_commit(lambda: enqueue_start(run_id) if admitted else enqueue_dispatch(place.pk))
    return run


def record_base_revision(run: Run, revision: Callable[[], str], lease_token: int) -> None:
    """A run created without its workspace (by the web process) starts from the revision
    the worker found after preparing it; written once, under the worker's lease."""
    state = load_state(run)
    if state.base_revision:
        return
    state.base_revision = state.revision = revision()
    DjangoStore(Lease(lease_token)).checkpoint(state, [])
    run.refresh_from_db()


def stop_undriven(run: Run, reason: str, message: str, lease_token: int) -> str:
    """A workspace the worker cannot prepare (found only then: a git ref that is not a
    commit, a malformed archive) or whose revision fails its verification stops the
    run, saying why, instead of leaving it running or waiting."""
    state = load_state(run)
    stop = ev.Stopped(run_id=str(run.pk), seq=0, ts=time.time(), status=reason, message=message, **said_at_stop(state, reason, message))
    apply(state, stop)  # a stopped run waits for nothing
    DjangoStore(Lease(lease_token)).checkpoint(state, [stop])
    # Its requests leave the reviewers' queue, as with any stop.
    cancel_open_requests(str(run.pk), f"the run stopped: {reason}", fence=Lease(lease_token))
    return reason


def starts_an_agent(run: Run) -> bool:
    """Whether the run's proposer is an outside agent Harness starts in a container
    (runs.agents.launch), not one that connects by itself (``mcp-client``)."""
    proposer = run.proposer or {}
    return proposer.get("kind") == "agent" and proposer.get("preset", "mcp-client") != "mcp-client"


def kill_with_agent(run_id: str, environment: Environment) -> None:
    """A kill of an agent's run: the execution in flight and the agent, at once."""
    from runs.agents.launch import kill

    try:
        environment.kill()
    finally:
        kill(run_id)


def let_agent_go(run_id: str) -> None:
    from runs.agents.launch import let_go

    finished = Run.objects.filter(pk=run_id, status=Run.Status.COMPLETE).exists()
    let_go(run_id, finished=finished)


def wait_for_decision(run_id: str, token: int) -> bool:
    """An agent's run waiting for a reviewer, under this worker's lease (which the
    Watchdog renews): True once the wait is over (a decision, a lapse, an expiry or
    a kill: ``invariants.wake_was_missed``), so the run is driven on at once; False
    when the lease was taken over meanwhile. A run's deadline does not run while it
    waits (core.waits)."""
    poll = max(0.25, float(settings.HARNESS_KILL_POLL_SECONDS))
    while True:
        if not Run.objects.filter(pk=run_id, lease_token=token).exists():
            return False
        if invariants.wake_was_missed(run_id):
            return True
        time.sleep(poll)


def worker_identity() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


def advance(run_id: str, faults: Sequence[Fault] = ()) -> str:
    """Drive a run if no other worker holds it, until it waits or stops; return its
    outcome, or why it was not driven."""
    holder = hosts.live_holder(run_id)
    if holder is not None:
        # Its workspace is on a live host's disk: that host resumes it (runs/scheduling/hosts.py).
        queue.enqueue_resume(run_id)
        return "held_by_host"
    token = leases.acquire(run_id, worker_identity())
    if token is None:
        return "leased_elsewhere"
    try:
        outcome = drive_leased(run_id, token, faults)
    finally:
        leases.release(run_id, token)
    # A decision, a lapse (a policy save) or a kill between the run's last checkpoint
    # and the release sent a wake-up that found the lease taken and was dropped: send
    # it again now rather than leave it to the sweep.
    if outcome == "waiting_approval" and invariants.wake_was_missed(run_id):
        queue.enqueue_resume(run_id)
    return outcome


def _renewal() -> dict[str, float]:
    return {"poll": float(settings.HARNESS_KILL_POLL_SECONDS), "renew_every": settings.HARNESS_LEASE_SECONDS / 3}


def drive_leased(run_id: str, token: int, faults: Sequence[Fault]) -> str:
    """``advance``'s drive, under the lease ``token``."""
    try:
        run = Run.objects.select_related("policy").get(pk=run_id)
        if run.status in (Run.Status.COMPLETE, Run.Status.STOPPED):
            return run.outcome
        if run.queued:
            # Not admitted yet: nothing of it runs, no workspace, no container. A kill
            # stops it where it stands; otherwise its project's queue starts it.
            if kill_requested(run_id):
                return stop_undriven(
                    run, "killed", f"{killed_by(run_id) or 'killed'} while queued in its project, before it started", token
                )
            return "queued"
        try:
            # Preparing the workspace and starting its container can outlast the lease
            # (a loaded engine, a large checkout): renewed meanwhile as the Watchdog
            # below renews it while the run is driven, which also acts on a kill.
            with Watchdog(run_id, renew=lambda: leases.renew(run_id, token), on_kill=lambda: None, **_renewal()):
                environment = environment_for(run, Lease(token), faults)  # prepares, keeps or rebuilds the workspace
        except (WorkspaceSourceError, RemoteError) as exc:
            return stop_undriven(run, "workspace_error", f"the workspace could not be prepared: {exc}", token)
        except RebuildFailed as exc:
            if Run.objects.filter(pk=run_id, kill_requested=True).exists():
                # An operator's kill is what stops it; the rebuild was only on the way there.
                return stop_undriven(run, "killed", f"killed; its workspace was not rebuilt after its host was gone: {exc}", token)
            return stop_undriven(run, "workspace_lost", f"the run's workspace could not be rebuilt on this worker: {exc}", token)
        try:
            record_base_revision(run, environment.workspace.revision, token)
        except RevisionMismatch as exc:
            environment.close()  # the container started for the run it will not drive
            return stop_undriven(run, "revision_mismatch", str(exc), token)
        agent = starts_an_agent(run)
        try:
            with Watchdog(
                run_id,
                renew=lambda: leases.renew(run_id, token),
                on_kill=(lambda: kill_with_agent(run_id, environment)) if agent else environment.kill,
                **_renewal(),
            ) as watchdog:
                state = drive_run(run, environment, DjangoApprovals(run, token), lease_token=token, controls=watchdog)
                # An agent's state is its process, whose only way out is this
                # worker's egress proxy: the run keeps its lease, container and
                # agent while a reviewer decides, and drives on from the decision.
                while agent and state.status == "waiting_approval" and wait_for_decision(run_id, token):
                    watchdog.look()
                    run.refresh_from_db()
                    state = drive_run(run, environment, DjangoApprovals(run, token), lease_token=token, controls=watchdog)
        except Unstorable as exc:
            # A value no database takes reached a checkpoint: driving the run again
            # would fail at the same step (and ask the model again, each time), so it
            # stops now, from its last stored state, saying what could not be stored.
            environment.close()
            run.refresh_from_db()
            return stop_undriven(
                run, "unstorable", f"a value could not be stored, so the run cannot go on: {escaped_text(str(exc))}", token
            )
        finally:
            if agent:
                # The worker lets the run go (stopped, finished, its lease lost, a
                # failure): its agent ends with it and its token stops working.
                let_agent_go(run_id)
        if state.finished or state.status == "waiting_approval":
            # An approval can take hours: no container idles meanwhile; resuming
            # starts a fresh one on the same workspace.
            environment.close()
        return state.outcome
    except LeaseLost:
        log.warning("run %s: lease taken over; this worker stopped driving it", run_id)
        return "lease_lost"
