"""Every write to a run's log is fenced (docs/design.md, Recovery): the worker driving
a run writes only under its lease, notifications and approval lapses included, so a
worker whose lease was taken over writes nothing; everyone else writes under the run
row's lock."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence

import pytest
from django.db import connection

from approvals.models import ApprovalRequest
from core import events as ev
from core.environment import Environment
from core.faults import Fault
from core.fences import Lease, RowLock
from core.ports import Call, Reconciliation
from core.scenarios import call
from core.state import PendingEffect
from runs import runtime
from runs.approval_flow.flow import cancel_open_requests, do_lapse
from runs.approval_flow.gate import DjangoApprovals
from runs.models import Event, Run
from runs.persistence.eventlog import LeaseLost, append_event
from runs.scheduling import leases
from runs.services import drive_run
from tests.helpers import World

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.postgres]


class HeldCheck:
    """The run's executor, holding its check until told to go on; meanwhile it tells
    the run's log it waits for the engine, as the sandbox's executor does."""

    def __init__(self, world: World) -> None:
        self.world = world
        self.notify: Callable[[ev.Event], None] | None = None
        self.started, self.go = threading.Event(), threading.Event()
        self.notified: list[BaseException | None] = []

    def execute(self, c: Call) -> object:
        if c.tool == "run_check":
            self.started.set()
            assert self.go.wait(30)
            assert self.notify is not None
            try:
                self.notify(ev.SandboxWaiting(run_id=c.run_id, seq=0, ts=time.time(), call_id=c.call_id, reason="engine gone", until=0.0))
                self.notified.append(None)
            except LeaseLost as exc:
                self.notified.append(exc)
        return self.world.executor.execute(c)

    def reconcile(self, effect: PendingEffect) -> Reconciliation:
        return self.world.executor.reconcile(effect)


def taken_over(run_id: str) -> int:
    """Another worker claims the run: the first one's lease ran out (a stall)."""
    Run.objects.filter(pk=run_id).update(lease_expires_at=None)
    token = leases.acquire(run_id, "worker-b", seconds=60)
    assert token is not None
    return token


def test_it_writes_nothing_from_a_worker_whose_lease_was_taken_over(monkeypatch: pytest.MonkeyPatch) -> None:
    world = World()
    run = world.create(script=[call("run_check", check_id="tests"), call("read_file", path="src/calc.py")])
    run_id = str(run.pk)
    held = HeldCheck(world)
    leased: list[Lease] = []

    def environment(run: Run, lease: Lease, faults: Sequence[Fault] = ()) -> Environment:
        # As runtime.sandbox_environment wires it: the executor's notify is the
        # runtime's, fenced by the lease of the worker that drives the run.
        leased.append(lease)
        held.notify = lambda event: runtime.notify(run_id, event, lease)
        return Environment(held, world.workspace)

    monkeypatch.setattr(runtime, "environment_for", environment)
    outcome: list[str] = []

    def worker_a() -> None:
        try:
            outcome.append(runtime.advance(run_id))
        finally:
            connection.close()

    thread = threading.Thread(target=worker_a)
    thread.start()
    try:
        assert held.started.wait(10)
        before = list(Event.objects.filter(run_id=run_id).order_by("seq").values_list("seq", "type"))
        token_b = taken_over(run_id)
        assert leased == [Lease(token_b - 1)]
    finally:
        held.go.set()
        thread.join(20)
    assert outcome == ["lease_lost"]
    (refused,) = held.notified
    assert isinstance(refused, LeaseLost), "the old worker's engine notification was written"
    after = list(Event.objects.filter(run_id=run_id).order_by("seq").values_list("seq", "type"))
    assert after == before, "the worker whose lease was taken over wrote to the run's log"
    run.refresh_from_db()
    assert (run.lease_token, run.lease_owner) == (token_b, "worker-b")  # its release did not free the new holder's lease
    # The new holder writes where the old one could not.
    runtime.notify(
        run_id, ev.SandboxWaitOver(run_id=run_id, seq=0, ts=time.time(), engine_back=True, waited_seconds=0.0, detail=""), Lease(token_b)
    )
    assert Event.objects.filter(run_id=run_id, type="sandbox_wait_over").count() == 1


def waiting_run() -> tuple[Run, ApprovalRequest]:
    world = World()
    run = world.create()
    state = drive_run(run, world.environment(), DjangoApprovals(run))
    assert state.status == "waiting_approval"
    return run, ApprovalRequest.objects.get(run=run, status="pending")


def test_it_refuses_the_old_workers_lapses_and_cancellations_and_keeps_the_request() -> None:
    run, request = waiting_run()
    run_id = str(run.pk)
    token_a = leases.acquire(run_id, "worker-a", seconds=60)
    assert token_a is not None
    token_b = taken_over(run_id)
    events = Event.objects.filter(run=run).count()
    old = DjangoApprovals(run, token_a)
    with pytest.raises(LeaseLost):
        old.lapse(str(request.pk), "stale", "the old worker saw a new policy")
    with pytest.raises(LeaseLost):
        old.cancel_open(run_id, "the old worker stopped the run")
    with pytest.raises(LeaseLost):
        cancel_open_requests(run_id, "the old worker stopped the run", fence=Lease(token_a))
    request.refresh_from_db()
    assert request.status == "pending", "a lapse refused by the fence must roll back with its event"
    assert Event.objects.filter(run=run).count() == events
    assert DjangoApprovals(run, token_b).cancel_open(run_id, "the new holder stopped the run") == [str(request.pk)]
    assert Event.objects.filter(run=run, type="approval_lapsed").count() == 1


def test_it_orders_a_row_lock_writer_with_the_driver_whoever_drives() -> None:
    """A reviewer, an operator or the beat does not drive the run: its write does not
    depend on the lease (taken or not) and gets the next seq under the row lock."""
    run, request = waiting_run()
    run_id = str(run.pk)
    assert leases.acquire(run_id, "worker-a", seconds=60) is not None
    before = Run.objects.get(pk=run_id).last_seq
    row = append_event(run_id, ev.KillRequested, fence=RowLock("a test's operator"), by="otto", scope="run")
    assert row.seq == before + 1
    assert do_lapse(request, "stale", "the policy moved", fence=RowLock("a test's reviewer"))
    assert list(Event.objects.filter(run=run, seq__gt=before).values_list("type", flat=True)) == ["kill_requested", "approval_lapsed"]
