"""The kill switch: per run and global. A kill is a flag in the database; the
worker driving the run polls it, kills the sandbox process and container, and the
loop stops ``killed`` at its next guard."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from django.contrib.auth.models import AnonymousUser, User
from django.db import DatabaseError, connection, transaction
from django.utils import timezone

from common import permissions
from core import events as ev
from core.fences import RowLock
from ledger.writer import batch as ledger_batch
from ledger.writer import token_of
from projects.access import holds_globally, permissions_in
from projects.audit import record
from projects.models import Project
from runs.approval_flow.flow import cancel_open_requests
from runs.models import Event, GlobalSwitch, Run
from runs.persistence.eventlog import append_event
from runs.scheduling.queue import enqueue_dispatch, enqueue_resume

log = logging.getLogger(__name__)

ACTIVE = (Run.Status.RUNNING, Run.Status.WAITING)


class ControlRefused(Exception):
    pass


KILL_REASON_CHARS = 500


def check_operator(user: User | AnonymousUser, run: Run) -> None:
    # The project's roles, not ``user.has_perm``: Django's superuser shortcut would
    # answer past a token narrowed to another role (projects.access.narrow).
    if not user.is_authenticated or permissions.OPERATE_RUNS not in permissions_in(user, run.project_id):
        raise ControlRefused("you are not an operator of this run's project")


def check_global_operator(user: User | AnonymousUser) -> None:
    """The global switch reaches every project's runs: a project's operators may not turn it."""
    if not user.is_authenticated or not holds_globally(user, permissions.OPERATE_RUNS):
        raise ControlRefused("the global switch is for site admins and global operators")


def check_project_operator(user: User | AnonymousUser, project: Project) -> None:
    if not user.is_authenticated or permissions.OPERATE_RUNS not in permissions_in(user, project.pk):
        raise ControlRefused("you are not an operator of this project")


def kill_words(by: str, scope: str, reason: str) -> str:
    """Who killed a run and why, as its stop, the inbox and the audit say it."""
    if scope == "global":
        return f"{by} turned on Stop all runs"
    if scope == "project":
        return f"{by} stopped all runs of its project"
    return f"killed by {by}" + (f": {reason}" if reason else "")


def stopping_reason(by: str, scope: str, reason: str) -> str:
    """Why a kill cancelled a run's open requests."""
    return f"the run is being stopped: {kill_words(by, scope, reason)}"


def do_kill(run: Run, by: str, scope: str = "run", reason: str = "", via: str = "") -> bool:
    """Flag a run for killing. Its open approval requests are cancelled at once, so
    they leave the reviewers' queue whether or not a worker is about. A run waiting
    for approval has no driver to notice, so it is resumed: the loop's first guard
    then stops it ``killed``."""
    # The kill's and the cancellations' ledger entries are written at the end, after the
    # run's and its requests' rows are locked (ledger.writer).
    with ledger_batch():
        flagged = Run.objects.filter(pk=run.pk, status__in=ACTIVE, kill_requested=False).update(kill_requested=True)
        if flagged:
            # An operator does not drive the run: the conditional UPDATE above (it
            # holds the run row's lock to the end of this transaction) decides, once.
            killing = RowLock("an operator's kill")
            append_event(str(run.pk), ev.KillRequested, fence=killing, by=by, scope=scope, reason=reason, via=via)
            cancel_open_requests(str(run.pk), stopping_reason(by, scope, reason), fence=killing)
            transaction.on_commit(lambda: enqueue_resume(str(run.pk)))
    return flagged == 1


def kill(run: Run, user: User | AnonymousUser, reason: str = "") -> bool:
    check_operator(user, run)
    return do_kill(run, user.get_username(), reason=reason.strip()[:KILL_REASON_CHARS], via=token_of(user))


def set_global(user: User | AnonymousUser, *, stop_all: bool, admit_new: bool) -> int:
    """Turn the global switch; with stop_all, every active run is killed now."""
    check_global_operator(user)
    switch = GlobalSwitch.get()
    with transaction.atomic():
        GlobalSwitch.objects.filter(pk=switch.pk).update(
            stop_all=stop_all, admit_new=admit_new, changed_by=user.get_username(), changed_at=timezone.now()
        )
        # Who turned the global switch, in the audit and so in the decision ledger.
        record(None, user, "global_switch_set", stop_all=stop_all, admit_new=admit_new)
    killed = 0
    if stop_all:
        for run in Run.objects.filter(status__in=ACTIVE):
            killed += do_kill(run, user.get_username(), scope="global", via=token_of(user))
    return killed


def set_project_switch(user: User | AnonymousUser, project: Project, *, paused: bool | None = None, stop_all: bool = False) -> int:
    """A project's own switch, for its operators: pause (no new run starts: creating one
    is refused, the queue holds) or resume, and stop all its active runs (queued ones
    too) now. Each change is in the project's audit. Returns the runs killed."""
    check_project_operator(user, project)
    killed = 0
    # Its runs' rows first, the ledger's heads at the end (ledger.writer).
    with ledger_batch():
        # Conditional: a click that changes nothing (already paused) records nothing.
        if paused is not None and Project.objects.filter(pk=project.pk).exclude(paused=paused).update(paused=paused):
            record(project, user, "project_paused" if paused else "project_resumed")
            if not paused:
                # The queue held while paused moves on.
                transaction.on_commit(lambda: enqueue_dispatch(project.pk))
        if stop_all:
            for run in Run.objects.filter(project=project, status__in=ACTIVE):
                killed += do_kill(run, user.get_username(), scope="project", via=token_of(user))
            record(project, user, "project_stopped_all", killed=killed)
    project.refresh_from_db(fields=["paused"])
    return killed


def killed_by(run_id: str) -> str:
    """Who asked for the run's kill and why (the newest kill's words: the kill form's
    reason, the operator's name), as its stop says it; empty if nobody did."""
    row = Event.objects.filter(run_id=run_id, type=ev.type_name(ev.KillRequested)).order_by("-seq").first()
    kill = row.typed() if row is not None else None
    if not isinstance(kill, ev.KillRequested):
        return ""
    return kill_words(kill.by or "an operator", kill.scope, kill.reason)


def kill_requested(run_id: str) -> bool:
    flagged = Run.objects.filter(pk=run_id).values_list("kill_requested", flat=True).first()
    return bool(flagged) or stopping_all_runs()


def stopping_all_runs() -> bool:
    return GlobalSwitch.objects.filter(pk=1, stop_all=True).exists()


def admitting_new_runs() -> bool:
    return not GlobalSwitch.objects.filter(pk=1, admit_new=False).exists()


class Watchdog:
    """Runs beside a driving loop: renews the lease and turns a kill flag into an
    immediate kill of the sandbox execution in flight."""

    def __init__(self, run_id: str, renew: Callable[[], bool], on_kill: Callable[[], None], poll: float, renew_every: float) -> None:
        self.run_id = run_id
        self._renew = renew
        self._on_kill = on_kill
        self._poll = poll
        self._renew_every = renew_every
        self._killed = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name=f"watchdog-{run_id}", daemon=True)

    def kill_requested(self) -> bool:
        return self._killed.is_set()

    def killed_by(self) -> str:
        return killed_by(self.run_id)

    def __enter__(self) -> Watchdog:
        # A run woken only to be killed (it was waiting) must see the flag at its
        # very first guard, not one poll later.
        if kill_requested(self.run_id):
            self._killed.set()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def look(self) -> None:
        """Look at the kill flag now, not a poll later: the driver's own wait (an agent's
        run waiting for a reviewer, runs.runtime.wait_for_decision) that a kill ended
        (it cancels the run's requests) drives on knowing it was a kill."""
        if not self._killed.is_set() and kill_requested(self.run_id):
            self._killed.set()
            self._kill_in_flight()

    def _kill_in_flight(self) -> None:
        try:
            self._on_kill()
        except Exception:  # this thread must live on to renew the lease
            # The loop still stops at its next guard; the sweeper removes a container
            # the engine would not remove now.
            log.exception("run %s: killing the execution in flight failed", self.run_id)

    def _watch(self) -> None:
        last_renew = time.monotonic()
        try:
            while not self._stop.wait(self._poll):
                try:
                    if not self._killed.is_set() and kill_requested(self.run_id):
                        self._killed.set()
                        self._kill_in_flight()
                    if time.monotonic() - last_renew > self._renew_every:
                        self._renew()
                        last_renew = time.monotonic()
                except DatabaseError:
                    # A lost connection: try again with a fresh one next round; if the
                    # database stays away, the lease runs out and fencing takes over.
                    connection.close()
        finally:
            # This thread's own database connection; the loop's is untouched.
            connection.close()
