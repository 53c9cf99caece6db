"""A stateful model-based test of the run's life around humans and effects
(docs/design.md, Lifecycle): Hypothesis drives real runs (the Django store, the
approval flow, the sweep; a simulated executor) through random interleavings
of proposals (identical and different effects), grants, denials, requests for
changes, expiries, workspace and policy changes, kills, the global stop, worker
crashes with resumes, and the beat's sweep. After every step it checks the invariants (docs/design.md,
Lifecycle), a gap-free event log, and that the log explains the stored state
(core.fold). The figures are in docs/reliability.md."""

from __future__ import annotations

import contextlib
import os
import time
from collections import Counter
from datetime import timedelta
from typing import ClassVar
from unittest import mock

import pytest
from django.contrib.auth.models import User
from django.utils import timezone
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule, run_state_machine_as_test

from approvals.checks import DecisionRefused
from approvals.models import ApprovalRequest, PolicyVersion
from core.feedback import Feedback
from core.jsonutil import JSON
from core.lifecycle import OPEN_STATUSES, REQUEST_TRANSITIONS
from core.scenarios import FIXED, call
from core.waits import approval_key
from runs import invariants
from runs.approval_flow.flow import deny, expire_due, grant, request_changes, save_policy_version
from runs.approval_flow.gate import DjangoApprovals
from runs.control import do_kill, set_global
from runs.models import Event, Run
from runs.persistence.statecheck import state_problems
from runs.persistence.store import DjangoStore
from runs.services import drive_run
from tests.helpers import CONTRACT, Crash, CrashingStore, KillFlag, World, edited_policy, new_policy_version

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.postgres, pytest.mark.slow]

EXAMPLES = int(os.environ.get("HARNESS_MACHINE_EXAMPLES", "25"))
STEPS = int(os.environ.get("HARNESS_MACHINE_STEPS", "30"))
PUBLISHES = [
    call("publish", message="reject negative quantities"),
    call("publish", message="reject negative quantities"),  # the model repeating itself
    call("publish", message="another wording"),
]
PROPOSALS = [
    *PUBLISHES,
    call("read_file", path="src/calc.py"),
    call("write_file", path="src/calc.py", content=FIXED),
    call("write_file", path="src/calc.py", content=FIXED + "# second thoughts\n"),
    call("run_check", check_id="tests"),
    *PUBLISHES,
    call("lookup_publish"),
    call("finish", summary="done"),
]
# Every run starts with the fix written and checked, so a publish asks a reviewer at once.
SETUP = [call("write_file", path="src/calc.py", content=FIXED), call("run_check", check_id="tests")]
MACHINE_CONTRACT = {**CONTRACT, "allowed_tools": [*CONTRACT["allowed_tools"], "lookup_publish"]}
STATS: Counter[str] = Counter()
RUNS = st.integers(0, 7)


class Idle(Exception):
    """The model has nothing to say until the machine's next step."""


class Model:
    """A proposer fed one proposal per step by the machine."""

    def __init__(self) -> None:
        self.queue: list[object] = []

    def propose(self, feedback: Feedback | None) -> object | None:
        if not self.queue:
            raise Idle()
        return self.queue.pop(0)

    def snapshot(self) -> dict[str, JSON]:
        return {"kind": "scripted", "position": 0}

    def refused(self) -> None:
        """Its proposals are the test's."""

    def notes(self) -> list[dict[str, JSON]]:
        return []


class Lifecycle(RuleBasedStateMachine):
    # The personas, set by the test before Hypothesis builds the machines.
    operator: ClassVar[User]
    reviewer: ClassVar[User]

    def __init__(self) -> None:
        super().__init__()
        self.worlds: dict[str, World] = {}
        self.models: dict[str, Model] = {}
        self.checked: dict[str, int] = {}
        new_policy_version(publish="ask")
        STATS["examples"] += 1

    # -- driving -----------------------------------------------------------------

    def drive(self, run_id: str, store: DjangoStore | None = None) -> None:
        run = Run.objects.get(pk=run_id)
        with contextlib.suppress(Idle):
            drive_run(
                run,
                self.worlds[run_id].environment(),
                DjangoApprovals(run),
                controls=KillFlag(run_id),
                proposer=self.models[run_id],
                store=store,
            )

    def new_run(self) -> str:
        world = World()
        run = world.create(actor=self.operator, script=[], contract=MACHINE_CONTRACT)
        run_id = str(run.pk)
        self.worlds[run_id], self.models[run_id] = world, Model()
        self.models[run_id].queue = list(SETUP)
        self.drive(run_id)
        STATS["runs"] += 1
        return run_id

    def pending(self, run_id: str) -> ApprovalRequest | None:
        return ApprovalRequest.objects.filter(run_id=run_id, status="pending").first()

    def step(self, name: str) -> None:
        STATS["steps"] += 1
        STATS[name] += 1

    # -- rules -------------------------------------------------------------------

    def active(self, pick: int) -> str:
        """One of the example's runs still going (a new one if none is), so every step acts."""
        going = [r for r in self.worlds if Run.objects.get(pk=r).status in (Run.Status.RUNNING, Run.Status.WAITING)]
        if not going:
            self.step("start")
            return self.new_run()
        return going[pick % len(going)]

    @initialize()
    def first_run(self) -> None:
        """Each example starts with a run waiting for a reviewer."""
        run_id = self.new_run()
        self.models[run_id].queue = [call("publish", message="reject negative quantities")]
        self.drive(run_id)

    @rule(pick=RUNS, proposal=st.sampled_from(PROPOSALS))
    def propose(self, pick: int, proposal: dict[str, object]) -> None:
        run_id = self.active(pick)
        self.step(f"propose {proposal['tool']}")
        self.models[run_id].queue = [proposal]
        self.drive(run_id)

    @rule(pick=RUNS, how=st.sampled_from(["grant", "deny", "expire", "changes"]))
    def decide(self, pick: int, how: str) -> None:
        """A reviewer decides the run's request (or asks for changes instead), or nobody
        does in time. A run with nothing to decide is first given a publish to ask about."""
        run_id = self.active(pick)
        self.step(how)
        if self.pending(run_id) is None:
            self.models[run_id].queue = [call("publish", message="reject negative quantities")]
            self.drive(run_id)
        request = self.pending(run_id)
        if request is None:
            return
        try:
            if how == "grant":
                grant(request, self.reviewer)
            elif how == "deny":
                deny(request, self.reviewer, "not this one")
            elif how == "changes":
                request_changes(request, self.reviewer, "name the ticket in the message")
            else:
                ApprovalRequest.objects.filter(pk=request.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
                expire_due()
        except DecisionRefused:
            STATS[f"{how} refused"] += 1
        self.drive(run_id)

    @rule(
        pick=RUNS, what=st.sampled_from(["workspace a", "workspace b", "policy ask", "policy allow", "save ask", "save allow", "new run"])
    )
    def disturb(self, pick: int, what: str) -> None:
        """The world moves under the runs: someone edits a workspace behind a run's
        back, an admin saves a policy version (through the service, which lapses the
        requests it makes stale and wakes their runs, or around it, leaving that to
        the sweep), or another run starts."""
        self.step(what.split()[0] if what != "new run" else "start")
        if what.startswith("workspace"):
            self.worlds[self.active(pick)].workspace.files["src/notes.txt"] = what
        elif what.startswith("policy"):
            new_policy_version(publish=what.split()[1])
        elif what.startswith("save"):
            self.save_policy(what.split()[1])
        else:
            self.new_run()

    def save_policy(self, publish: str) -> None:
        woken: list[str] = []
        with mock.patch("runs.scheduling.queue.enqueue_resume", woken.append):
            save_policy_version(PolicyVersion(note="saved by the machine"), edited_policy(publish=publish))
        for run_id in woken:  # what the workers do with the wake-ups (earlier examples' runs are left)
            if run_id in self.worlds:
                self.drive(run_id)

    @rule(pick=RUNS, how=st.sampled_from(["kill", "kill", "kill", "global"]))
    def stop(self, pick: int, how: str) -> None:
        """An operator kills a run, or (rarer) every run with the global switch."""
        self.step(how)
        if how == "kill":
            run_id = self.active(pick)
            do_kill(Run.objects.get(pk=run_id), "otto")
            self.drive(run_id)
            return
        set_global(self.operator, stop_all=True, admit_new=True)
        try:
            for run_id in self.worlds:
                self.drive(run_id)
        finally:
            set_global(self.operator, stop_all=False, admit_new=True)

    @rule(pick=RUNS, proposal=st.sampled_from(PROPOSALS), at=st.integers(1, 4))
    def crash_and_resume(self, pick: int, proposal: dict[str, object], at: int) -> None:
        run_id = self.active(pick)
        self.step("crash and resume")
        self.models[run_id].queue = [proposal]
        try:
            self.drive(run_id, CrashingStore(at))
        except Crash:
            STATS["crashes"] += 1
        self.drive(run_id)

    @rule()
    def sweep(self) -> None:
        self.step("sweep")
        invariants.cancel_orphaned_requests()
        invariants.lapse_stale_requests()
        for run_id in invariants.waits_to_end():
            if run_id in self.worlds:
                self.drive(run_id)

    # -- invariants ----------------------------------------------------------------

    def changed(self) -> list[tuple[Run, World]]:
        """The runs to check after this step: every run whose log grew, and every
        waiting run (its request's expiry is a matter of time). A finished run whose
        log did not grow cannot have changed: every change of a run or its requests
        writes an event."""
        found = []
        for run_id, world in self.worlds.items():
            run = Run.objects.get(pk=run_id)
            if run.status == Run.Status.WAITING or self.checked.get(run_id) != run.last_seq:
                self.checked[run_id] = run.last_seq
                found.append((run, world))
        return found

    @invariant()
    def invariants_hold(self) -> None:
        for run, world in self.changed():
            self.log_is_gap_free(run)
            self.a_waiting_run_has_exactly_one_pending_request_and_only_it(run)
            self.no_effect_twice_and_none_without_a_consumed_grant(run, world)
            self.the_log_explains_the_state(run)

    def log_is_gap_free(self, run: Run) -> None:
        seqs = list(Event.objects.filter(run=run).order_by("seq").values_list("seq", flat=True))
        assert seqs == list(range(1, len(seqs) + 1)) and run.last_seq == len(seqs)

    def the_log_explains_the_state(self, run: Run) -> None:
        assert state_problems(run) == []

    def a_waiting_run_has_exactly_one_pending_request_and_only_it(self, run: Run) -> None:
        requests = list(ApprovalRequest.objects.filter(run=run))
        assert {r.status for r in requests} <= set(REQUEST_TRANSITIONS)
        open_requests = [r for r in requests if r.status in OPEN_STATUSES]
        if run.status == Run.Status.WAITING:
            assert [(str(r.pk), r.status) for r in open_requests] == [(run.state["waiting"]["request_id"], "pending")]
            assert open_requests[0].expires_at > timezone.now()
        else:
            assert open_requests == [], (run.status, [(r.status, r.reason) for r in open_requests])

    def no_effect_twice_and_none_without_a_consumed_grant(self, run: Run, world: World) -> None:
        keys = [c.idempotency_key for c in world.executor.calls if c.tool == "publish"]
        assert len(keys) == len(set(keys)), "one operation performed twice"
        assert len(run.state["effects_applied"]) == len(set(run.state["effects_applied"]))
        for started in Event.objects.filter(run=run, type="call_started", payload__tool="publish"):
            admissions = Event.objects.filter(run=run, type="call_admitted", call_id=started.call_id, seq__lt=started.seq)
            latest = admissions.order_by("-seq").first()
            assert latest is not None
            admitted = latest.payload
            if admitted["decision"] != "ask":
                continue
            key = approval_key("publish", admitted["args"], admitted["revision"], admitted["policy_version"], admitted.get("effect"))
            assert ApprovalRequest.objects.filter(run=run, key=key, status="consumed", consumed_by_call=started.call_id).exists(), (
                "an effect without a consumed grant for its tool, arguments, revision and policy version"
            )


# Each way out of a wait, from the run every example starts with (waiting for a
# reviewer), reached on purpose: which ones the random interleavings reach depends on
# timing (leases, kills, expiry under load), so the coverage is not left to chance.
DIRECTED: dict[str, tuple[str, dict[str, object]]] = {
    "granted": ("decide", {"how": "grant"}),
    "denied": ("decide", {"how": "deny"}),
    "changes_requested": ("decide", {"how": "changes"}),
    "expired": ("decide", {"how": "expire"}),
    "cancelled": ("stop", {"how": "kill"}),
    "stale": ("disturb", {"what": "save allow"}),
}


def directed(name: str, arguments: dict[str, object]) -> None:
    machine = Lifecycle()
    machine.first_run()
    getattr(machine, name)(pick=0, **arguments)
    machine.invariants_hold()


def test_it_keeps_every_invariant_through_random_interleavings(operator: User, reviewer: User) -> None:
    Lifecycle.operator, Lifecycle.reviewer = operator, reviewer
    STATS.clear()
    started = time.monotonic()
    run_state_machine_as_test(  # type: ignore[no-untyped-call]  # Hypothesis leaves it unannotated
        Lifecycle,
        settings=settings(
            max_examples=EXAMPLES,
            stateful_step_count=STEPS,
            derandomize=True,
            database=None,
            deadline=None,
            suppress_health_check=list(HealthCheck),
        ),
    )
    seconds = time.monotonic() - started
    exits = Counter(Event.objects.filter(type="wait_ended").values_list("payload__exit", flat=True))
    for name, arguments in DIRECTED.values():
        directed(name, arguments)
    reached = Counter(Event.objects.filter(type="wait_ended").values_list("payload__exit", flat=True)) - exits
    outcomes = Counter(Run.objects.exclude(status__in=["running", "waiting_approval"]).values_list("outcome", flat=True))
    duplicates = Event.objects.filter(type="duplicate_effect").count()
    print(
        f"\nlifecycle machine: {dict(STATS)}, wait exits {dict(exits)} (random), {dict(reached)} (directed), outcomes {dict(outcomes)}, duplicates {duplicates}, {seconds:.1f}s"
    )
    # Steps in the hundreds, and every way out of a wait reached by its directed example.
    assert STATS["steps"] >= 300
    assert set(DIRECTED) <= set(reached), (dict(reached), dict(exits))
