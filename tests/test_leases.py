"""Exactly one worker drives a run: leases claimed by conditional UPDATE, fenced
writes, and the watchdog that turns a kill flag into a stop."""

from __future__ import annotations

import threading
import time

import pytest
from django.db import connection

from core.fences import Lease
from core.ports import Call, Reconciliation
from core.scenarios import call
from core.state import PendingEffect
from runs import runtime
from runs.approval_flow.gate import DjangoApprovals
from runs.control import Watchdog, do_kill
from runs.models import Event, Run
from runs.persistence.store import DjangoStore, LeaseLost, load_state
from runs.scheduling import leases
from runs.services import drive_run
from tests.helpers import World

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.postgres]


def test_it_gives_the_lease_to_one_claimant_and_fences_the_old_holder() -> None:
    run = World().create()
    run_id = str(run.pk)
    first = leases.acquire(run_id, "worker-a", seconds=60)
    assert first is not None
    assert leases.acquire(run_id, "worker-b", seconds=60) is None
    Run.objects.filter(pk=run_id).update(lease_expires_at=None)  # worker-a's lease runs out
    second = leases.acquire(run_id, "worker-b", seconds=60)
    assert second == first + 1
    state = load_state(Run.objects.get(pk=run_id))
    with pytest.raises(LeaseLost):
        DjangoStore(Lease(first)).checkpoint(state, [])
    DjangoStore(Lease(second)).checkpoint(state, [])
    assert not leases.renew(run_id, first)
    assert leases.renew(run_id, second)


def test_it_lets_exactly_one_of_many_concurrent_claimants_win() -> None:
    run_id = str(World().create().pk)
    barrier = threading.Barrier(20)
    tokens: list[int | None] = []

    def claim(n: int) -> None:
        try:
            barrier.wait()
            tokens.append(leases.acquire(run_id, f"w{n}", seconds=60))
        finally:
            connection.close()

    threads = [threading.Thread(target=claim, args=(n,)) for n in range(20)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len([t for t in tokens if t is not None]) == 1


def test_it_does_nothing_when_a_second_worker_gets_the_same_run(monkeypatch: pytest.MonkeyPatch) -> None:
    world = World()
    run = world.create()
    monkeypatch.setattr(runtime, "environment_for", lambda run, lease, faults=(): world.environment())
    leases.acquire(str(run.pk), "someone-else", seconds=60)
    assert runtime.advance(str(run.pk)) == "leased_elsewhere"
    assert Event.objects.filter(run=run).count() == 0
    assert world.executor.calls == []


def test_it_drives_the_run_under_a_lease_and_releases_it(monkeypatch: pytest.MonkeyPatch) -> None:
    world = World()
    run = world.create()
    monkeypatch.setattr(runtime, "environment_for", lambda run, lease, faults=(): world.environment())
    assert runtime.advance(str(run.pk)) == "waiting_approval"
    run.refresh_from_db()
    assert run.lease_owner == "" and run.lease_expires_at is None and run.lease_token == 1


BLOCK_SECONDS = 600


class BlockingExecutor:
    """Blocks in execute until killed (or for BLOCK_SECONDS, a long check's length),
    like a long check in the sandbox."""

    def __init__(self, world: World) -> None:
        self.world = world
        self.started = threading.Event()
        self.killed = threading.Event()

    def execute(self, c: Call) -> object:
        if c.tool != "write_file":
            return self.world.executor.execute(c)
        self.started.set()
        self.killed.wait(BLOCK_SECONDS)
        return {
            "call_id": c.call_id,
            "tool": c.tool,
            "status": "unknown",
            "effect": "unknown",
            "revision": self.world.workspace.revision(),
            "data": {"killed": True},
            "artifacts": [],
        }

    def kill(self) -> None:
        self.killed.set()

    def reconcile(self, effect: PendingEffect) -> Reconciliation:
        return Reconciliation(False, None, False, "sandbox gone")


def test_it_kills_an_executing_call_and_records_the_write_as_pending() -> None:
    world = World()
    run = world.create(script=[call("write_file", path="src/calc.py", content="x = 1\n"), call("finish")])
    blocking = BlockingExecutor(world)
    run_id = str(run.pk)
    result = {}

    def drive() -> None:
        try:
            with Watchdog(run_id, renew=lambda: True, on_kill=blocking.kill, poll=0.1, renew_every=10) as dog:
                env = world.environment()
                env.executor = blocking
                result["state"] = drive_run(Run.objects.get(pk=run_id), env, DjangoApprovals(run), controls=dog)
        finally:
            connection.close()

    thread = threading.Thread(target=drive)
    thread.start()
    assert blocking.started.wait(BLOCK_SECONDS)
    do_kill(run, "otto")
    # The call ends because the watchdog killed it, long before it would have by itself.
    assert blocking.killed.wait(BLOCK_SECONDS)
    thread.join(BLOCK_SECONDS)
    assert not thread.is_alive()
    state = result["state"]
    assert state.outcome == "killed"
    assert [p.call_id for p in state.unresolved_effects()] == ["c1"]
    run.refresh_from_db()
    assert run.report.data["pending"][0]["tool"] == "write_file"
    assert Event.objects.filter(run=run, type="kill_requested").count() == 1


def test_it_keeps_renewing_the_lease_when_killing_the_execution_fails() -> None:
    run = World().create()
    renewals: list[float] = []

    def failing_kill() -> None:
        raise ConnectionError("the engine did not answer")

    def renew() -> bool:
        renewals.append(time.monotonic())
        return True

    with Watchdog(str(run.pk), renew=renew, on_kill=failing_kill, poll=0.05, renew_every=0.1) as dog:
        do_kill(run, "otto")
        deadline = time.monotonic() + 10
        while not dog.kill_requested() and time.monotonic() < deadline:
            time.sleep(0.05)
        killed_at = time.monotonic()
        time.sleep(0.5)
    assert dog.kill_requested()
    assert [t for t in renewals if t > killed_at], "the watchdog thread died with the failed kill"
