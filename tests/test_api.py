"""The REST API (issue 7): the pages' permissions for every endpoint and persona,
400s that name the field and leave nothing behind, and a run created, approved and
completed through the API on a real worker."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pytest
from django.contrib.auth.models import User
from rest_framework.test import APIClient

from api.models import ApiToken
from approvals.models import ApprovalRequest
from runs.approval_flow.gate import DjangoApprovals
from runs.models import Event, GlobalSwitch, Run
from runs.services import drive_run
from tests.fixtures_services import Worker
from tests.helpers import World

if TYPE_CHECKING:
    from rest_framework.response import _MonkeyPatchedResponse  # the test client's response: only the stubs name it

# other_member: a reviewer and operator of another project, to whom this project's run
# and request do not exist.
PERSONAS = ("reviewer", "operator", "admin_user", "outsider", "other_member")
SMALL_CONTRACT: dict[str, Any] = {
    "task_id": "api-orders",
    "objective": "fix the negative quantity bug",
    "acceptance_criteria": ["tests pass"],
    "workspace": {"kind": "path", "path": "examples/orders"},
    "allowed_write_paths": ["orders/*"],
    "allowed_tools": ["read_file", "write_file", "run_check", "publish"],
    "verification_targets": ["tests"],
    "limits": {"max_proposals": 10, "max_tool_calls": 10, "max_attempts": 2, "wall_time_seconds": 300, "max_output_bytes_per_call": 65536},
}
SCRIPT = {"kind": "scripted", "script": [{"tool": "finish", "args": {"summary": "nothing to do"}}]}
FIXED_TOTAL = '''"""Order totals in cents."""

from __future__ import annotations

from collections.abc import Iterable, Mapping


def order_total(lines: Iterable[Mapping[str, int]], discount_percent: int = 0) -> int:
    if not 0 <= discount_percent <= 100:
        raise ValueError(f"discount must be between 0 and 100 percent, got {discount_percent}")
    subtotal = 0
    for line in lines:
        if line["quantity"] < 0:
            raise ValueError(f"quantity must not be negative, got {line['quantity']}")
        subtotal += line["unit_price"] * line["quantity"]
    return subtotal * (100 - discount_percent) // 100
'''
FIX_AND_PUBLISH = {
    "kind": "scripted",
    "script": [
        {"tool": "read_file", "args": {"path": "orders/total.py"}},
        {"tool": "write_file", "args": {"path": "orders/total.py", "content": FIXED_TOTAL}},
        {"tool": "run_check", "args": {"check_id": "tests"}},
        {"tool": "publish", "args": {"message": "reject negative quantities"}},
        {"tool": "finish", "args": {"summary": "negative quantities are rejected"}},
    ],
}


def client_for(user: User | None) -> APIClient:
    client = APIClient()
    if user is not None:
        client.credentials(HTTP_AUTHORIZATION=f"Token {ApiToken.issue(user)[1]}")
    return client


@pytest.fixture
def as_user(request: pytest.FixtureRequest) -> Callable[[str], APIClient]:
    return lambda persona: client_for(request.getfixturevalue(persona))


@dataclass
class Waiting:
    """A run (started by the operator) waiting for approval of ``publish``."""

    run: Run
    approval: ApprovalRequest


@pytest.fixture
def waiting(operator: User) -> Waiting:
    world = World()
    run = world.create(actor=operator)
    drive_run(run, world.environment(), DjangoApprovals(run))
    run.refresh_from_db()
    assert run.status == "waiting_approval"
    return Waiting(run, ApprovalRequest.objects.get(run=run))


# (method, path, body, the status each persona gets in PERSONAS order)
ENDPOINTS: list[tuple[str, str, Any, tuple[int, int, int, int, int]]] = [
    ("get", "/api/runs/", None, (200, 200, 200, 403, 200)),
    ("post", "/api/runs/", {"contract": SMALL_CONTRACT, "proposer": SCRIPT, "project": "default"}, (403, 201, 201, 403, 403)),
    ("get", "/api/runs/{run}/", None, (200, 200, 200, 403, 404)),
    ("get", "/api/runs/{run}/events/", None, (200, 200, 200, 403, 404)),
    ("get", "/api/runs/{run}/report/", None, (200, 200, 200, 403, 404)),
    ("post", "/api/runs/{run}/kill/", None, (403, 202, 202, 403, 404)),
    ("get", "/api/approvals/", None, (200, 200, 200, 403, 200)),
    ("get", "/api/approvals/{approval}/", None, (200, 200, 200, 403, 404)),
    ("post", "/api/approvals/{approval}/grant/", None, (200, 403, 200, 403, 404)),
    ("post", "/api/approvals/{approval}/deny/", {"reason": "not now"}, (200, 403, 200, 403, 404)),
    ("post", "/api/approvals/{approval}/request-changes/", {"message": "name the ticket"}, (200, 403, 200, 403, 404)),
    ("get", "/api/switch/", None, (200, 200, 200, 403, 200)),
    ("post", "/api/switch/", {"admit_new": True}, (403, 200, 200, 403, 403)),
]
CASES = [
    pytest.param(method, path, body, persona, expected[i], id=f"{method}-{path}-{persona}")
    for method, path, body, expected in ENDPOINTS
    for i, persona in enumerate(PERSONAS)
]


def call(client: APIClient, method: str, path: str, body: Any = None) -> _MonkeyPatchedResponse:
    send: Callable[..., _MonkeyPatchedResponse] = getattr(client, method)
    return send(path, body, format="json") if body is not None else send(path)


def url(path: str, waiting: Waiting) -> str:
    return path.format(run=waiting.run.pk, approval=waiting.approval.pk)


@pytest.mark.parametrize(("method", "path", "body", "persona", "expected"), CASES)
def test_it_gives_each_persona_what_the_pages_give_them(
    method: str, path: str, body: Any, persona: str, expected: int, waiting: Waiting, as_user: Callable[[str], APIClient]
) -> None:
    response = call(as_user(persona), method, url(path, waiting), body)
    assert response.status_code == expected, response.content
    assert response["Content-Type"] == "application/json"


@pytest.mark.parametrize(("method", "path", "body"), [e[:3] for e in ENDPOINTS])
def test_it_answers_401_without_credentials_and_changes_nothing(method: str, path: str, body: Any, waiting: Waiting) -> None:
    response = call(client_for(None), method, url(path, waiting), body)
    assert response.status_code == 401
    assert response["WWW-Authenticate"] == "Token"
    assert Run.objects.count() == 1 and not Run.objects.get().kill_requested
    assert ApprovalRequest.objects.get().status == "pending"


def test_it_refuses_a_wrong_token(waiting: Waiting) -> None:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION="Token not-a-token")
    assert client.get("/api/runs/").status_code == 401


def test_it_names_every_bad_contract_field_and_creates_nothing(operator: User) -> None:
    contract = {
        **SMALL_CONTRACT,
        "allowed_tools": ["read_file", "teleport"],
        "limits": {**SMALL_CONTRACT["limits"], "max_attempts": "three"},
    }
    del contract["objective"]
    response = client_for(operator).post("/api/runs/", {"contract": contract, "proposer": SCRIPT}, format="json")
    assert response.status_code == 400
    errors = response.json()
    assert set(errors) == {"contract.objective", "contract.limits.max_attempts"}, errors
    assert Run.objects.count() == 0


def test_it_names_semantic_problems_after_the_shape_is_right(operator: User) -> None:
    contract = {**SMALL_CONTRACT, "allowed_tools": ["read_file", "teleport"], "verification_targets": ["nope"]}
    response = client_for(operator).post("/api/runs/", {"contract": contract, "proposer": SCRIPT}, format="json")
    assert response.status_code == 400
    assert response.json() == {
        "contract.allowed_tools[1]": ["unknown tool 'teleport'"],
        "contract.verification_targets[0]": ["unknown check 'nope'"],
    }
    assert Run.objects.count() == 0


def test_it_creates_no_run_when_the_workspace_cannot_be_prepared(operator: User) -> None:
    contract = {**SMALL_CONTRACT, "workspace": {"kind": "path", "path": "examples/no-such-dir"}}
    response = client_for(operator).post("/api/runs/", {"contract": contract, "proposer": SCRIPT}, format="json")
    assert response.status_code == 400
    assert list(response.json()) == ["contract.workspace.path"]
    assert Run.objects.count() == 0


@pytest.mark.postgres
@pytest.mark.parametrize(
    ("raw", "field"),
    [
        ('{"contract": ', "body"),
        ("[1, 2]", "non_field_errors"),
        ('{"contract": [], "proposer": {}}', "contract"),
        ('{"contract": {}}', "proposer"),
        (json.dumps({"contract": SMALL_CONTRACT, "proposer": {"kind": "oracle"}}), "proposer.kind"),
        ('{"contract": {"objective": "a\\u0000b"}, "proposer": {}}', "contract.objective"),
    ],
)
def test_it_answers_400_naming_the_field_for_malformed_bodies(raw: str, field: str, operator: User) -> None:
    response = client_for(operator).post("/api/runs/", raw, content_type="application/json")
    assert response.status_code == 400
    assert field in response.json(), response.json()
    assert Run.objects.count() == 0


def test_it_answers_415_for_a_body_that_is_not_json(operator: User) -> None:
    response = client_for(operator).post("/api/runs/", "contract=x", content_type="application/x-www-form-urlencoded")
    assert response.status_code == 415


@pytest.mark.parametrize(
    "path",
    [
        "/api/runs/00000000-0000-0000-0000-000000000000/",
        "/api/runs/not-a-uuid/",
        "/api/runs/not-a-uuid/events/",
        "/api/runs/00000000-0000-0000-0000-000000000000/report/",
        "/api/approvals/0/",
    ],
)
def test_it_answers_404_for_unknown_and_malformed_ids(path: str, admin_user: User) -> None:
    response = client_for(admin_user).get(path)
    assert response.status_code == 404
    assert "detail" in response.json()


def test_it_answers_404_when_deciding_or_killing_an_unknown_id(admin_user: User) -> None:
    client = client_for(admin_user)
    assert client.post("/api/approvals/00000000-0000-0000-0000-000000000000/grant/").status_code == 404
    assert client.post("/api/approvals/x/deny/", {"reason": "r"}, format="json").status_code == 404
    assert client.post("/api/runs/x/kill/").status_code == 404


def test_it_reads_events_after_a_seq_in_bounded_pages(waiting: Waiting, reviewer: User) -> None:
    client = client_for(reviewer)
    run = waiting.run
    seen: list[int] = []
    after = 0
    while True:
        page = client.get(f"/api/runs/{run.pk}/events/", {"after": after, "limit": 3}).json()
        seen += [event["seq"] for event in page["events"]]
        assert len(page["events"]) <= 3
        after = page["next_after"]
        if not page["has_more"]:
            break
    assert seen == list(range(1, run.last_seq + 1))
    assert page["run_status"] == "waiting_approval"
    first = client.get(f"/api/runs/{run.pk}/events/", {"limit": 1}).json()["events"][0]
    assert first["seq"] == 1 and first["type"] == "run_started" and first["run"] == str(run.pk)
    empty = client.get(f"/api/runs/{run.pk}/events/", {"after": run.last_seq}).json()
    assert empty == {"events": [], "next_after": run.last_seq, "has_more": False, "run_status": "waiting_approval"}


@pytest.mark.parametrize(
    ("params", "field"),
    [({"limit": 501}, "limit"), ({"limit": 0}, "limit"), ({"after": -1}, "after"), ({"after": "x"}, "after")],
)
def test_it_refuses_bad_event_paging_by_name(params: dict[str, Any], field: str, waiting: Waiting, reviewer: User) -> None:
    response = client_for(reviewer).get(f"/api/runs/{waiting.run.pk}/events/", params)
    assert response.status_code == 400
    assert list(response.json()) == [field]


def test_it_answers_head_like_get(waiting: Waiting, operator: User) -> None:
    client = client_for(operator)
    assert client.head("/api/runs/", {"status": "waiting_approval"}).status_code == 200
    assert client.head("/api/runs/", {"status": "sleeping"}).status_code == 400
    assert client.head(f"/api/runs/{waiting.run.pk}/events/", {"after": 1}).status_code == 200


def test_it_refuses_unknown_query_parameters_by_name(waiting: Waiting, operator: User) -> None:
    response = client_for(operator).get("/api/runs/", {"stauts": "waiting_approval"})
    assert response.status_code == 400 and response.json() == {"stauts": ["Unknown query parameter."]}
    assert client_for(operator).get(f"/api/runs/{waiting.run.pk}/", {"x": 1}).status_code == 400


def test_it_filters_runs_by_status_and_task_id(waiting: Waiting, operator: User) -> None:
    client = client_for(operator)
    other = World().create(actor=operator)
    Run.objects.filter(pk=other.pk).update(task_id="other-task")
    listed = client.get("/api/runs/").json()
    assert listed["count"] == 2 and {r["id"] for r in listed["results"]} == {str(waiting.run.pk), str(other.pk)}
    waiting_only = client.get("/api/runs/", {"status": "waiting_approval"}).json()
    assert [r["id"] for r in waiting_only["results"]] == [str(waiting.run.pk)]
    assert waiting_only["results"][0]["created_by"] == "otto-operator"
    by_task = client.get("/api/runs/", {"task_id": "other-task"}).json()
    assert [r["id"] for r in by_task["results"]] == [str(other.pk)]
    paged = client.get("/api/runs/", {"limit": 1, "offset": 1}).json()
    assert paged["count"] == 2 and len(paged["results"]) == 1 and paged["previous"] is not None


@pytest.mark.parametrize(
    ("path", "params", "field"),
    [
        ("/api/runs/", {"status": "sleeping"}, "status"),
        ("/api/runs/", {"limit": 201}, "limit"),
        ("/api/runs/", {"offset": -1}, "offset"),
        ("/api/runs/", {"task_id": "x" * 101}, "task_id"),
        ("/api/approvals/", {"run": "nope"}, "run"),
        ("/api/approvals/", {"status": "maybe"}, "status"),
        ("/api/approvals/", {"limit": "many"}, "limit"),
    ],
)
def test_it_refuses_bad_list_filters_by_name(path: str, params: dict[str, Any], field: str, admin_user: User) -> None:
    response = client_for(admin_user).get(path, params)
    assert response.status_code == 400
    assert list(response.json()) == [field]


def test_it_lists_approvals_by_run_and_status(waiting: Waiting, reviewer: User, operator: User) -> None:
    client = client_for(reviewer)
    World().create(actor=operator)
    listed = client.get("/api/approvals/", {"run": str(waiting.run.pk), "status": "pending"}).json()
    assert listed["count"] == 1
    item = listed["results"][0]
    assert item["id"] == str(waiting.approval.pk) and item["tool"] == "publish"
    assert item["args"] == {"message": "reject negative quantities"} and item["revision"] == waiting.run.revision
    assert item["evidence"][0]["passed"] and item["requested_by"] == "otto-operator"
    assert client.get("/api/approvals/", {"status": "granted"}).json()["count"] == 0


def test_it_grants_and_the_run_can_use_the_approval_once(waiting: Waiting, reviewer: User) -> None:
    response = client_for(reviewer).post(f"/api/approvals/{waiting.approval.pk}/grant/")
    assert response.status_code == 200
    assert response.json()["status"] == "granted" and response.json()["decided_by"] == "rita-reviewer"
    again = client_for(reviewer).post(f"/api/approvals/{waiting.approval.pk}/grant/")
    assert again.status_code == 409 and "already granted" in again.json()["detail"]


def test_it_requires_a_reason_to_deny_and_keeps_the_request_pending(waiting: Waiting, reviewer: User) -> None:
    client = client_for(reviewer)
    for body in ({}, {"reason": "   "}, {"reason": 5}, {"reason": "x" * 2001}):
        response = client.post(f"/api/approvals/{waiting.approval.pk}/deny/", body, format="json")
        assert response.status_code == 400 and list(response.json()) == ["reason"], (body, response.json())
    waiting.approval.refresh_from_db()
    assert waiting.approval.status == "pending"
    response = client.post(f"/api/approvals/{waiting.approval.pk}/deny/", {"reason": "release freeze"}, format="json")
    assert response.status_code == 200
    assert response.json()["status"] == "denied" and response.json()["reason"] == "release freeze"


def test_it_refuses_a_decision_by_the_user_who_started_the_run(admin_user: User) -> None:
    world = World()
    run = world.create(actor=admin_user)
    drive_run(run, world.environment(), DjangoApprovals(run))
    approval = ApprovalRequest.objects.get(run=run)
    response = client_for(admin_user).post(f"/api/approvals/{approval.pk}/grant/")
    assert response.status_code == 403 and "separation of duties" in response.json()["detail"]
    approval.refresh_from_db()
    assert approval.status == "pending"


def test_it_kills_an_active_run_and_answers_409_for_a_finished_one(waiting: Waiting, operator: User) -> None:
    client = client_for(operator)
    response = client.post(f"/api/runs/{waiting.run.pk}/kill/")
    assert response.status_code == 202 and response.json()["kill_requested"] is True
    assert client.post(f"/api/runs/{waiting.run.pk}/kill/").status_code == 202
    Run.objects.filter(pk=waiting.run.pk).update(status="stopped", outcome="killed")
    finished = client.post(f"/api/runs/{waiting.run.pk}/kill/")
    assert finished.status_code == 409 and "already finished (killed)" in finished.json()["detail"]


def test_it_turns_the_global_switch_and_refuses_new_runs_while_closed(waiting: Waiting, operator: User) -> None:
    client = client_for(operator)
    closed = client.post("/api/switch/", {"admit_new": False}, format="json")
    assert closed.status_code == 200
    assert closed.json() | {"changed_at": None} == {
        "stop_all": False,
        "admit_new": False,
        "changed_by": "otto-operator",
        "changed_at": None,
        "killed": 0,
    }
    refused = client.post("/api/runs/", {"contract": SMALL_CONTRACT, "proposer": SCRIPT}, format="json")
    assert refused.status_code == 409 and "admits no new runs" in refused.json()["detail"]
    assert Run.objects.count() == 1
    stop = client.post("/api/switch/", {"stop_all": True}, format="json").json()
    assert stop["killed"] == 1 and stop["stop_all"] is True and stop["admit_new"] is False
    waiting.run.refresh_from_db()
    assert waiting.run.kill_requested
    assert client.get("/api/switch/").json()["stop_all"] is True


@pytest.mark.parametrize(("body", "field"), [({}, "non_field_errors"), ({"stop_all": "yes"}, "stop_all"), ({"admit_new": 0}, "admit_new")])
def test_it_refuses_switch_changes_that_are_not_booleans(body: dict[str, Any], field: str, operator: User) -> None:
    response = client_for(operator).post("/api/switch/", body, format="json")
    assert response.status_code == 400 and list(response.json()) == [field]
    switch = GlobalSwitch.get()
    assert (switch.stop_all, switch.admit_new) == (False, True)


def test_it_creates_a_run_with_the_caller_as_its_starter(operator: User) -> None:
    response = client_for(operator).post("/api/runs/", {"contract": SMALL_CONTRACT, "proposer": SCRIPT}, format="json")
    assert response.status_code == 201, response.json()
    created = response.json()
    run = Run.objects.get(pk=created["id"])
    assert created["status"] == "running" and created["task_id"] == "api-orders"
    assert created["created_by"] == "otto-operator" and run.created_by == operator
    # The workspace is prepared by the worker that drives the run: no revision yet.
    assert created["revision"] == run.revision == ""


def test_it_trades_a_password_for_a_token(reviewer: User) -> None:
    client = APIClient()
    response = client.post("/api/auth/token/", {"username": "rita-reviewer", "password": "rita-reviewer-pass-123"}, format="json")
    assert response.status_code == 200
    token = response.json()["token"]
    found = ApiToken.find(token)
    assert found is not None and found.user == reviewer
    wrong = client.post("/api/auth/token/", {"username": "rita-reviewer", "password": "guess"}, format="json")
    assert wrong.status_code == 400 and "non_field_errors" in wrong.json()
    missing = client.post("/api/auth/token/", {"username": "rita-reviewer"}, format="json")
    assert missing.status_code == 400 and list(missing.json()) == ["password"]


def test_it_accepts_a_browser_session_and_requires_csrf_for_changes(waiting: Waiting, operator: User) -> None:
    client = APIClient(enforce_csrf_checks=True)
    client.force_login(operator)
    assert client.get("/api/runs/").status_code == 200
    response = client.post(f"/api/runs/{waiting.run.pk}/kill/")
    assert response.status_code == 403 and "CSRF" in response.json()["detail"]
    waiting.run.refresh_from_db()
    assert not waiting.run.kill_requested


def wait_until(
    fetch: Callable[[], dict[str, Any]], done: Callable[[dict[str, Any]], bool], timeout: float = 90, log: Callable[[], str] = lambda: ""
) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = fetch()
        if done(value):
            return value
        time.sleep(0.2)
    raise AssertionError(f"gave up waiting; last {value}\n{log()[-4000:]}")


@pytest.mark.celery
@pytest.mark.docker
def test_it_creates_a_run_that_waits_for_a_grant_and_completes_all_through_the_api(
    celery_worker: Worker, operator: User, reviewer: User
) -> None:
    ops, rev = client_for(operator), client_for(reviewer)
    created = ops.post("/api/runs/", {"contract": SMALL_CONTRACT, "proposer": FIX_AND_PUBLISH}, format="json")
    assert created.status_code == 201, created.json()
    run_url = f"/api/runs/{created.json()['id']}/"
    run = wait_until(lambda: ops.get(run_url).json(), lambda r: r["status"] != "running", log=celery_worker.log)
    assert run["status"] == "waiting_approval", run
    pending = rev.get("/api/approvals/", {"run": run["id"], "status": "pending"}).json()["results"]
    assert len(pending) == 1 and pending[0]["tool"] == "publish"
    assert rev.post(f"/api/approvals/{pending[0]['id']}/grant/").status_code == 200
    run = wait_until(lambda: ops.get(run_url).json(), lambda r: r["status"] in ("complete", "stopped"), log=celery_worker.log)
    assert run["outcome"] == "complete", run["stop_message"]
    events, after = [], 0
    while True:
        page = ops.get(f"{run_url}events/", {"after": after, "limit": 7}).json()
        events += page["events"]
        after = page["next_after"]
        if not page["has_more"]:
            break
    assert [e["seq"] for e in events] == list(range(1, run["last_seq"] + 1))
    assert [e["type"] for e in events] == list(Event.objects.filter(run_id=run["id"]).order_by("seq").values_list("type", flat=True))
    assert events[-1]["type"] == "stopped" and events[-1]["payload"]["status"] == "complete"
    report = ops.get(f"{run_url}report/").json()
    assert report["status"] == "complete"
