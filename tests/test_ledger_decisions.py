"""Every decision is an entry of the decision ledger, written in the decision's own
transaction (docs/design.md, Decision ledger): each gate's on each call (allowed,
asked, denied by rule, refused) with the rule's inputs as what it was shown; each
reviewer's, with the quorum so far; each consumption, expiry and cancellation; each
operator's kill and switch; each admin's change. A decision whose transaction rolls
back leaves no entry, and of concurrent reviewers exactly the decisions made are
recorded, once each."""

from __future__ import annotations

import json
import threading
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import Group, User
from django.db import connection, transaction
from django.test import Client
from django.utils import timezone
from hypothesis import given
from hypothesis import strategies as st

from approvals.checks import DecisionRefused
from approvals.models import ApprovalRequest, PolicyVersion
from core import events as ev
from core.fences import RowLock
from core.jsonutil import digest
from core.scenarios import call
from ledger import verify
from ledger.export import lines, verify_stored
from ledger.models import Entry
from projects.models import default_project_id
from runs.approval_flow.flow import deny, expire_due, grant, save_policy_version
from runs.approval_flow.gate import DjangoApprovals
from runs.control import do_kill, set_global
from runs.models import Event, Run
from runs.persistence.decisions import _decision, decision_of, gate_inputs
from runs.persistence.eventlog import append_event
from runs.services import drive_run
from tests.helpers import KillFlag, World, edited_policy, new_policy_version

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.postgres]


def drive(world: World, run: Run) -> str:
    run.refresh_from_db()
    return drive_run(run, world.environment(), DjangoApprovals(run), controls=KillFlag(str(run.pk))).status


def waiting(world: World, starter: User) -> tuple[Run, ApprovalRequest]:
    run = world.create(actor=starter)
    assert drive(world, run) == "waiting_approval"
    return run, ApprovalRequest.objects.get(run=run)


def kinds(**where: Any) -> list[str]:
    return list(Entry.objects.filter(**where).order_by("seq").values_list("kind", flat=True))


def decided(entry: Entry) -> dict[str, Any]:
    value = json.loads(entry.decided)
    assert isinstance(value, dict)
    return value


def test_it_records_each_gate_decision_with_the_rule_and_its_inputs(operator: User, reviewer: User, resumes: list[str]) -> None:
    world = World()
    run, request = waiting(world, operator)
    run_id = str(run.pk)
    assert kinds(run_id=run_id) == ["gate.allowed", "gate.allowed", "gate.allowed", "gate.asked"]
    asked = Entry.objects.get(run_id=run_id, kind="gate.asked")
    assert (asked.actor_kind, asked.actor) == ("rule", request.rule)
    assert asked.policy_version == request.policy_version and asked.project_id == run.project_id
    # What the rule was shown: the tool, the digest of the canonical arguments, the
    # revision, the policy version and the rule that matched.
    event = Event.objects.get(run=run, type="approval_required")
    inputs = {
        "tool": "publish",
        "args": digest(event.payload["args"]),
        "revision": request.revision,
        "policy_version": request.policy_version,
        "rule": request.rule,
        "decision": "approval_required",
        "effect": digest(event.payload["effect"]) if event.payload.get("effect") is not None else None,
    }
    assert asked.shown == verify.content_digest(inputs)
    assert decided(asked)["request_id"] == str(request.pk)
    grant(request, reviewer)
    assert drive(world, run) == "complete"
    assert kinds(run_id=run_id)[4:] == ["approval.granted", "approval.consumed", "gate.allowed"]
    granted = Entry.objects.get(run_id=run_id, kind="approval.granted")
    assert (granted.actor_kind, granted.actor) == ("user", reviewer.username)
    assert decided(granted)["grants"] == 1 and decided(granted)["needed"] == 1
    assert verify_stored() is None


def test_it_records_a_denial_by_rule_and_a_refused_proposal(operator: User) -> None:
    PolicyVersion.objects.all().delete()
    new_policy_version(publish="deny")
    world = World()
    run = world.create(actor=operator, script=[call("read_file", path="../etc/passwd"), *world_script_to_publish()])
    assert drive(world, run) == "stopped"
    run.refresh_from_db()
    assert run.outcome == "tool_denied"
    entries = list(Entry.objects.filter(run_id=str(run.pk)).order_by("seq"))
    refused = entries[0]
    assert refused.kind == "gate.refused" and refused.actor == "gate validate"
    denied = entries[-1]
    assert denied.kind == "gate.denied" and denied.actor_kind == "rule"
    assert denied.policy_version == PolicyVersion.objects.order_by("-version").first().version  # type: ignore[union-attr]


def world_script_to_publish() -> list[object]:
    return [call("publish", message="ship it")]


def test_it_records_kills_cancellations_expiry_and_switches(operator: User, admin_user: User, resumes: list[str]) -> None:
    world = World()
    run, request = waiting(world, operator)
    assert do_kill(run, operator.username, reason="enough")
    kill, cancelled = Entry.objects.filter(run_id=str(run.pk)).order_by("seq")[4:6]
    assert (kill.kind, kill.actor) == ("operator.kill", operator.username)
    assert decided(kill)["reason"] == "enough"
    assert cancelled.kind == "approval.cancelled" and decided(cancelled)["request"] == str(request.pk)
    # Expiry: the beat's.
    other, late = waiting(World(), operator)
    ApprovalRequest.objects.filter(pk=late.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    assert expire_due() == 1
    expired = Entry.objects.get(kind="approval.expired")
    assert expired.run_id == str(other.pk) and expired.actor_kind == "system"
    # The global switch: an operator's decision, audited, in the ledger.
    set_global(admin_user, stop_all=False, admit_new=False)
    switch = Entry.objects.get(kind="admin.global_switch_set")
    assert (switch.actor, switch.project_id) == (admin_user.username, None)
    assert decided(switch)["detail"] == {"stop_all": False, "admit_new": False}
    assert verify_stored() is None


def test_it_records_an_admins_policy_save_with_the_requests_it_made_stale(operator: User, admin_user: User, resumes: list[str]) -> None:
    world = World()
    run, request = waiting(world, operator)
    assert run.project_id is not None
    row = PolicyVersion(project_id=run.project_id, created_by=admin_user, note="stricter")
    save_policy_version(row, edited_policy())
    stale = Entry.objects.get(kind="approval.stale")
    saved = Entry.objects.get(kind="admin.policy_saved")
    # The lapse's entry and the save's, in the one transaction, in the order made.
    assert stale.seq < saved.seq and (saved.actor_kind, saved.actor) == ("user", admin_user.username)
    assert decided(saved)["detail"]["version"] == row.version and saved.project_id == run.project_id
    assert verify_stored() is None


def test_it_names_the_api_token_a_reviewer_decided_through(operator: User, reviewer: User, resumes: list[str]) -> None:
    from api.models import ApiToken

    world = World()
    _run, request = waiting(world, operator)
    _row, key = ApiToken.issue(reviewer)
    answer = Client().post(f"/api/approvals/{request.pk}/grant/", HTTP_AUTHORIZATION=f"Token {key}", content_type="application/json")
    assert answer.status_code == 200, answer.content
    granted = Entry.objects.get(kind="approval.granted")
    assert granted.actor.startswith(reviewer.username) and granted.actor_kind == "token"
    event = Event.objects.get(type="approval_decided")
    assert event.payload["via"].startswith("token ")


def test_it_names_the_api_token_an_operator_killed_through(operator: User, resumes: list[str]) -> None:
    from api.models import ApiToken

    world = World()
    run, _request = waiting(world, operator)
    _row, key = ApiToken.issue(operator)
    answer = Client().post(f"/api/runs/{run.pk}/kill/", HTTP_AUTHORIZATION=f"Token {key}", content_type="application/json")
    assert answer.status_code == 202, answer.content
    kill = Entry.objects.get(kind="operator.kill")
    assert kill.actor_kind == "token" and kill.actor.startswith(f"{operator.username} (token ")
    assert Event.objects.get(type="kill_requested").payload["via"].startswith("token ")
    assert verify_stored() is None


def test_it_leaves_no_entry_for_a_decision_whose_transaction_rolls_back(operator: User, reviewer: User, resumes: list[str]) -> None:
    world = World()
    run, request = waiting(world, operator)
    before = Entry.objects.count()

    class Abandoned(Exception):
        pass

    with pytest.raises(Abandoned), transaction.atomic():
        grant(request, reviewer)
        assert Entry.objects.filter(kind="approval.granted").count() == 1
        raise Abandoned
    assert Entry.objects.count() == before
    request.refresh_from_db()
    assert request.status == "pending"
    # A refused decision records nothing either; the decision made records one entry.
    with pytest.raises(DecisionRefused):
        deny(request, reviewer, "no", shown="0" * 64)
    assert Entry.objects.count() == before
    grant(ApprovalRequest.objects.get(pk=request.pk), reviewer)
    assert kinds(kind__startswith="approval.") == ["approval.granted"]
    assert verify_stored() is None


def test_it_records_exactly_the_decisions_made_by_concurrent_reviewers(operator: User, resumes: list[str]) -> None:
    group = Group.objects.get(name="reviewer")
    deciders = []
    for name in ("ria", "rob", "ray", "rex"):
        user = User.objects.create_user(username=name, password=f"{name}-pass-123")
        user.groups.add(group)
        deciders.append(user)
    world = World()
    run, request = waiting(world, operator)
    # Other runs' steps write the ledger at the same time: the chain holds across them.
    barrier = threading.Barrier(len(deciders))
    outcomes: dict[str, str] = {}

    def decide(user: User, n: int) -> None:
        try:
            barrier.wait()
            found = ApprovalRequest.objects.get(pk=request.pk)
            if n % 2:
                deny(found, user, f"no from {user.username}")
                outcomes[user.username] = "denied"
            else:
                grant(found, user)
                outcomes[user.username] = "granted"
        except DecisionRefused as exc:
            outcomes[user.username] = f"refused: {exc}"
        finally:
            connection.close()

    threads = [threading.Thread(target=decide, args=(user, n)) for n, user in enumerate(deciders)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    made = [outcome for outcome in outcomes.values() if not outcome.startswith("refused")]
    assert len(made) == 1, outcomes
    recorded = kinds(kind__startswith="approval.")
    assert recorded == [f"approval.{made[0]}"], (recorded, outcomes)
    assert Entry.objects.filter(kind=recorded[0]).get().actor in outcomes
    assert verify_stored() is None


@pytest.mark.usefixtures("fresh_ledger")
def test_it_keeps_one_chain_under_concurrent_writers_of_several_projects(operator: User) -> None:
    from ledger.writer import Decision, Shown, record, system
    from projects.models import Project

    projects = [default_project_id(), Project.objects.create(slug="ledger-b", name="B").pk]
    barrier = threading.Barrier(6)

    def write(n: int) -> None:
        try:
            barrier.wait()
            for i in range(10):
                # The last writer's decisions are of both projects at once (as a
                # policy save's or a project's "stop all" can be): written apart from
                # the one statement a decision of one project is on PostgreSQL.
                both = range(2) if n == 5 else (n + i,)
                with transaction.atomic():
                    record(
                        *(
                            Decision(
                                kind="admin.test_change",
                                actor=system("a test"),
                                decided={"writer": n, "i": i, "k": k},
                                shown=Shown.of({"writer": n, "i": i, "k": k}),
                                project_id=projects[k % 2],
                            )
                            for k in both
                        )
                    )
        finally:
            connection.close()

    threads = [threading.Thread(target=write, args=(n,)) for n in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert Entry.objects.count() == 70
    assert sorted(Entry.objects.values_list("seq", flat=True)) == list(range(1, 71))
    assert verify_stored() is None


def test_it_records_the_default_projects_first_memberships() -> None:
    from projects.models import GLOBAL_ROLES, default_project_id

    # Made by the flush before this test, as after every migrate (ensure_default_project).
    added = Entry.objects.filter(kind="admin.membership_added", project_id=default_project_id())
    assert sorted(decided(entry)["detail"]["role"] for entry in added) == sorted(GLOBAL_ROLES)
    assert {(entry.actor_kind, entry.actor) for entry in added} == {("system", "harness")}
    assert verify_stored() is None


def test_it_digests_what_a_gate_was_shown_as_stored_with_secrets_masked(operator: User, settings: Any) -> None:
    # The writer hands the ledger the typed events it stored; where masking changed a
    # row, the ledger's digests must cover the row (what an export can rebuild and
    # check), never the secret the event was given.
    secret = "hunter2-ledger-secret-value"
    settings.HARNESS_SECRET_VALUES = [secret]
    run = World().create(actor=operator)
    given = {"path": "notes.txt", "content": f"token={secret}\n"}
    stored = append_event(
        str(run.pk),
        ev.CallAdmitted,
        fence=RowLock("test"),
        call_id="c1",
        tool="write_file",
        tool_version="1",
        args=given,
        decision="allow",
        rule="writes allowed",
        revision="r0",
        policy_version=1,
    )
    assert secret not in json.dumps(stored.payload)
    entry = Entry.objects.get(run_id=str(run.pk), kind="gate.allowed")
    rebuilt = decision_of(Event.objects.get(pk=stored.pk))
    assert rebuilt is not None and entry.shown == rebuilt["shown"].digest
    shown = json.loads(rebuilt["shown"].canonical)
    assert shown["args"] == digest(stored.payload["args"]) != digest(given)
    [line] = [line for line in lines(run.project_id) if line["seq"] == entry.seq]
    assert line["content"] == rebuilt["shown"].canonical.decode()
    assert verify_stored() is None


texts = st.text() | st.none()


@given(texts, texts, texts, st.integers() | st.none(), st.text(), st.text(), texts)
def test_it_writes_a_gates_inputs_as_their_canonical_json(
    tool: str | None, args: str | None, revision: str | None, version: int | None, matched: str, decision: str, effect: str | None
) -> None:
    inputs = {
        "tool": tool,
        "args": args,
        "revision": revision,
        "policy_version": version,
        "rule": matched,
        "decision": decision,
        "effect": effect,
    }
    assert gate_inputs(tool, args, revision, version, matched, decision, effect) == verify.canonical(inputs)


@given(texts, st.text(), texts, st.integers(min_value=1), st.text(), st.text(), st.booleans())
def test_it_writes_an_admissions_decision_as_its_canonical_json(
    call_id: str | None, tool: str, idempotency_key: str | None, seq: int, key: str, request_id: str, asked: bool
) -> None:
    common = {"run_id": "r", "seq": seq, "ts": 0.0, "call_id": call_id, "tool": tool, "args": {}, "revision": "r0", "rule": "allow"}
    event: ev.Event = (
        ev.ApprovalRequired(**common, policy_version=1, key=key, request_id=request_id, idempotency_key=idempotency_key)
        if asked
        else ev.CallAdmitted(**common, tool_version="1", decision="allow", idempotency_key=idempotency_key)
    )
    found = _decision(seq, event)
    assert found is not None
    assert found["decided_text"] == verify.canonical(found["decided"]).decode("utf-8")
