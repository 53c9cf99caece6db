"""Every role across every page, API endpoint, action and both live sockets: who is let
in, who is sent to sign in, who gets 403, who is told the run does not exist (a member
of another project: the same answer as for a run that does not), and that every form
needs its CSRF token. The roles: no sign-in, signed in with no role, the global
reviewer and operator (the default project's through their groups), the default
project's admin (in person), a site admin, and a reviewer and operator of another
project."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pytest
from asgiref.sync import async_to_sync
from channels.testing import WebsocketCommunicator
from django.conf import settings
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from approvals.models import ApprovalRequest
from harness_site.asgi import application
from projects.models import Project
from runs.models import GlobalSwitch, Receipt, Run
from runs.persistence.artifacts import ArtifactStorage
from tests.fixtures_web import Scene, waiting_scene

if TYPE_CHECKING:
    from django.test.client import _MonkeyPatchedWSGIResponse  # the test client's response: only django-stubs names it

pytestmark = pytest.mark.django_db

ROLES = ["anonymous", "outsider", "reviewer", "operator", "project_admin", "admin_user", "other_member"]
# A reviewer and operator of another project: in on the pages that list what they may
# see; the run and its request here are unknown to them.
ELSEWHERE = "other_member"
VIEWERS = {"reviewer", "operator", "project_admin", "admin_user"}
STARTERS = {"operator", "project_admin", "admin_user"}
OPERATORS = {"operator", "project_admin", "admin_user"}
DECIDERS = {"reviewer", "project_admin", "admin_user"}
SIGNED_IN = set(ROLES) - {"anonymous"}
CONTRACT = """{"task_id": "orders-fix", "objective": "fix the order total", "acceptance_criteria": ["tests pass"],
 "workspace": {"kind": "path", "path": "examples/orders"}, "allowed_write_paths": ["orders/*"],
 "allowed_tools": ["read_file", "write_file", "run_check"], "verification_targets": ["tests"],
 "limits": {"max_proposals": 5, "max_tool_calls": 5, "max_attempts": 2, "wall_time_seconds": 60, "max_output_bytes_per_call": 65536}}"""


@dataclass
class ArtifactScene(Scene):
    """The waiting run's scene with one of its artifacts."""

    ref: str


@pytest.fixture
def scene(operator: User) -> ArtifactScene:
    """The operator started a run that waits for approval and has produced an artifact."""
    scene = waiting_scene(operator)
    ref = ArtifactStorage().put(b"check output\n", "text/plain")
    Receipt.objects.create(
        run=scene.run, call_id="c3", attempt=9, valid=True, body={"artifacts": [ref]}, harness_revision=scene.run.revision, event_seq=1
    )
    # A diff with lines it leaves out, and the file it was made from: its context can be read.
    ApprovalRequest.objects.filter(pk=scene.request.pk).update(
        diff="--- a/src/calc.py\n+++ b/src/calc.py\n@@ -2 +2 @@\n-    return q\n+    return abs(q)\n",
        sources={"src/calc.py": "def total(q):\n    return q\n"},
    )
    return ArtifactScene(scene.world, scene.run, scene.request, ref)


def client_for(role: str, request: pytest.FixtureRequest) -> Client:
    client = Client(enforce_csrf_checks=True)
    if role != "anonymous":
        user = request.getfixturevalue(role)
        client.force_login(user)
    return client


def csrf(client: Client) -> str:
    """The CSRF token a page would have put in its forms."""
    client.get(reverse("login"))
    client.get(reverse("runs:list"))
    return client.cookies[settings.CSRF_COOKIE_NAME].value


def assert_refused_or_allowed(
    response: _MonkeyPatchedWSGIResponse, role: str, allowed: set[str], ok_status: int = 200, *, of_the_run: bool = True
) -> None:
    """``of_the_run``: the URL names this project's run or request (not a list or a form)."""
    if role == ELSEWHERE:
        expected = 404 if of_the_run else (ok_status if allowed & {"reviewer", "operator"} else 403)
        assert response.status_code == expected, (role, response.status_code)
    elif role == "anonymous":
        assert response.status_code == 302 and response["Location"].startswith(reverse("login")), response.status_code
    elif role in allowed:
        assert response.status_code == ok_status, (role, response.status_code, response.content[:300])
    else:
        assert response.status_code == 403, (role, response.status_code)


def pages(scene: ArtifactScene) -> list[tuple[str, set[str], bool]]:
    """Each page, who may open it, and whether it is of the run (or its request)."""
    run, approval = scene.run.pk, scene.request.pk
    return [
        (reverse("runs:list"), VIEWERS, False),
        (reverse("runs:list") + "?status=waiting_approval&q=calc", VIEWERS, False),
        (reverse("runs:new"), STARTERS, False),
        (reverse("runs:detail", args=[run]), VIEWERS, True),
        (reverse("runs:events", args=[run]) + "?before=5", VIEWERS, True),
        (reverse("runs:event", args=[run, 1]), VIEWERS, True),
        (reverse("runs:summary", args=[run]), VIEWERS, True),
        (reverse("runs:report", args=[run]), VIEWERS, True),
        (reverse("runs:artifact", args=[run, scene.ref]), VIEWERS, True),
        (reverse("runs:kill", args=[run]), OPERATORS, True),
        (reverse("control"), OPERATORS, False),
        (reverse("approvals:inbox"), VIEWERS, False),
        (reverse("approvals:count"), VIEWERS, False),
        (reverse("approvals:detail", args=[approval]), VIEWERS, True),
        (reverse("approvals:context", args=[approval]) + "?path=src/calc.py&start=1&end=1", VIEWERS, True),
        # The default project's audit: its admins'.
        (reverse("project-audit", args=["default"]), {"project_admin", "admin_user"}, False),
        # One's own API tokens: everyone's who is signed in.
        (reverse("tokens"), SIGNED_IN, False),
    ]


@pytest.mark.parametrize("role", ROLES)
def test_it_lets_each_role_open_exactly_its_pages(role: str, scene: ArtifactScene, request: pytest.FixtureRequest) -> None:
    client = client_for(role, request)
    for url, allowed, of_the_run in pages(scene):
        assert_refused_or_allowed(client.get(url), role, allowed, of_the_run=of_the_run)


def test_it_lists_none_of_another_projects_runs_or_requests(scene: ArtifactScene, other_member: User) -> None:
    client = Client()
    client.force_login(other_member)
    for url in (reverse("runs:list"), reverse("approvals:inbox"), reverse("control")):
        page = client.get(url)
        assert page.status_code == 200 and str(scene.run.pk) not in page.content.decode(), url
    assert client.get(reverse("approvals:count")).json() == {"pending": 0}


@pytest.mark.parametrize("role", ROLES)
def test_it_lets_only_reviewers_grant(role: str, scene: ArtifactScene, request: pytest.FixtureRequest) -> None:
    client = client_for(role, request)
    response = client.post(reverse("approvals:grant", args=[scene.request.pk]), {"csrfmiddlewaretoken": csrf(client)})
    assert_refused_or_allowed(response, role, DECIDERS, ok_status=302)
    scene.request.refresh_from_db()
    assert scene.request.status == ("granted" if role in DECIDERS else "pending")


@pytest.mark.parametrize("role", ROLES)
def test_it_lets_only_reviewers_deny(role: str, scene: ArtifactScene, request: pytest.FixtureRequest) -> None:
    client = client_for(role, request)
    response = client.post(reverse("approvals:deny", args=[scene.request.pk]), {"csrfmiddlewaretoken": csrf(client), "reason": "not today"})
    assert_refused_or_allowed(response, role, DECIDERS, ok_status=302)
    scene.request.refresh_from_db()
    assert scene.request.status == ("denied" if role in DECIDERS else "pending")


@pytest.mark.parametrize("role", ROLES)
def test_it_lets_only_operators_kill_a_run(role: str, scene: ArtifactScene, request: pytest.FixtureRequest) -> None:
    client = client_for(role, request)
    response = client.post(reverse("runs:kill", args=[scene.run.pk]), {"csrfmiddlewaretoken": csrf(client)})
    assert_refused_or_allowed(response, role, OPERATORS, ok_status=302)
    assert Run.objects.get(pk=scene.run.pk).kill_requested is (role in OPERATORS)


@pytest.mark.parametrize("role", ROLES)
def test_it_lets_only_operators_turn_the_global_switch(role: str, scene: ArtifactScene, request: pytest.FixtureRequest) -> None:
    client = client_for(role, request)
    response = client.post(reverse("control"), {"csrfmiddlewaretoken": csrf(client), "action": "pause_admission"})
    if role in (ELSEWHERE, "project_admin"):
        # The page is theirs (their project's active runs); the global switch is not:
        # a project's role reaches no further than its project.
        assert response.status_code == 302
    else:
        assert_refused_or_allowed(response, role, OPERATORS, ok_status=302)
    assert GlobalSwitch.get().admit_new is (role not in {"operator", "admin_user"})


@pytest.mark.parametrize("role", ROLES)
def test_it_lets_only_the_projects_operators_turn_its_switch(role: str, scene: ArtifactScene, request: pytest.FixtureRequest) -> None:
    client = client_for(role, request)
    response = client.post(reverse("project-switch", args=["default"]), {"csrfmiddlewaretoken": csrf(client), "action": "pause"})
    assert_refused_or_allowed(response, role, OPERATORS, ok_status=302)
    assert Project.objects.get(slug="default").paused is (role in OPERATORS)


@pytest.mark.parametrize("role", ROLES)
def test_it_lets_only_reviewers_request_changes(role: str, scene: ArtifactScene, request: pytest.FixtureRequest) -> None:
    client = client_for(role, request)
    data = {"csrfmiddlewaretoken": csrf(client), "message": "name the ticket"}
    response = client.post(reverse("approvals:changes", args=[scene.request.pk]), data)
    assert_refused_or_allowed(response, role, DECIDERS, ok_status=302)
    scene.request.refresh_from_db()
    assert scene.request.status == ("changes_requested" if role in DECIDERS else "pending")


def api_reads(scene: ArtifactScene) -> list[tuple[str, set[str], bool]]:
    """Each API read, who may make it, and whether it is of the run (or its request)."""
    run, approval = scene.run.pk, scene.request.pk
    return [
        ("/api/runs/", VIEWERS, False),
        (f"/api/runs/{run}/", VIEWERS, True),
        (f"/api/runs/{run}/events/", VIEWERS, True),
        (f"/api/runs/{run}/report/", VIEWERS, True),
        (f"/api/runs/{run}/artifacts/{scene.ref}/", VIEWERS, True),
        ("/api/approvals/", VIEWERS, False),
        (f"/api/approvals/{approval}/", VIEWERS, True),
        ("/api/switch/", OPERATORS | {"reviewer", ELSEWHERE}, False),
    ]


@pytest.mark.parametrize("role", ROLES)
def test_it_answers_each_role_in_the_api_as_on_the_pages(role: str, scene: ArtifactScene, request: pytest.FixtureRequest) -> None:
    client = client_for(role, request)
    for url, allowed, of_the_run in api_reads(scene):
        status = client.get(url).status_code
        if role == "anonymous":
            expected = 401
        elif role == ELSEWHERE:
            expected = 404 if of_the_run else 200
        else:
            expected = 200 if role in allowed else 403
        assert status == expected, (role, url, status)


@pytest.mark.parametrize("role", ROLES)
def test_it_lets_only_the_api_kill_and_grant_for_their_roles(role: str, scene: ArtifactScene, request: pytest.FixtureRequest) -> None:
    client = client_for(role, request)
    headers = {"X-CSRFToken": csrf(client)}
    granted = client.post(f"/api/approvals/{scene.request.pk}/grant/", {}, content_type="application/json", headers=headers).status_code
    killed = client.post(f"/api/runs/{scene.run.pk}/kill/", {}, content_type="application/json", headers=headers).status_code
    for status, allowed, ok in ((granted, DECIDERS, 200), (killed, OPERATORS, 202)):
        expected = 401 if role == "anonymous" else 404 if role == ELSEWHERE else ok if role in allowed else 403
        assert status == expected, (role, granted, killed)


@pytest.mark.parametrize("role", ROLES)
def test_it_lets_only_operators_and_admins_start_runs(role: str, scene: ArtifactScene, request: pytest.FixtureRequest) -> None:
    client = client_for(role, request)
    before = Run.objects.count()
    response = client.post(
        reverse("runs:new"),
        {
            "csrfmiddlewaretoken": csrf(client),
            "project": "default",
            "contract": CONTRACT,
            "proposer_kind": "scripted",
            "proposer_options": '{"script": []}',
        },
    )
    if role == ELSEWHERE:
        # A run here is not theirs to start: this project is no choice on their form,
        # the same answer as for a project that does not exist.
        assert response.status_code == 400 and "not one of the available choices" in response.content.decode()
    else:
        assert_refused_or_allowed(response, role, STARTERS, ok_status=302)
    assert Run.objects.count() == before + (1 if role in STARTERS else 0)


@pytest.mark.parametrize(
    "name,data",
    [
        ("grant", {}),
        ("deny", {"reason": "no"}),
        ("kill", {}),
        ("control", {"action": "pause_admission"}),
        ("new", {"contract": CONTRACT, "proposer_kind": "scripted"}),
        ("logout", {}),
    ],
)
def test_it_refuses_every_form_without_its_csrf_token(name: str, data: dict[str, str], scene: ArtifactScene, admin_user: User) -> None:
    urls = {
        "grant": reverse("approvals:grant", args=[scene.request.pk]),
        "deny": reverse("approvals:deny", args=[scene.request.pk]),
        "kill": reverse("runs:kill", args=[scene.run.pk]),
        "control": reverse("control"),
        "new": reverse("runs:new"),
        "logout": reverse("logout"),
    }
    client = Client(enforce_csrf_checks=True)
    client.force_login(admin_user)
    runs_before = Run.objects.count()
    response = client.post(urls[name], data)
    assert response.status_code == 403
    assert b"CSRF" in response.content
    assert ApprovalRequest.objects.get(pk=scene.request.pk).status == "pending"
    assert not Run.objects.get(pk=scene.run.pk).kill_requested
    assert GlobalSwitch.get().admit_new and Run.objects.count() == runs_before
    assert "_auth_user_id" in client.session


def test_it_refuses_the_sign_in_form_without_its_csrf_token(reviewer: User) -> None:
    response = Client(enforce_csrf_checks=True).post(
        reverse("login"), {"username": reviewer.username, "password": "rita-reviewer-pass-123"}
    )
    assert response.status_code == 403


async def _socket_outcome(cookies: str, run_id: str) -> tuple[str, object]:
    communicator = WebsocketCommunicator(
        application, f"/ws/runs/{run_id}/", headers=[(b"origin", b"http://testserver"), (b"cookie", cookies.encode())]
    )
    connected, code = await communicator.connect()
    if not connected:
        return "rejected", code
    await communicator.send_json_to({"type": "subscribe", "after_seq": 0})
    first = await communicator.receive_json_from(timeout=5)
    if first["type"] == "error":
        closed = await communicator.receive_output(timeout=5)
        await communicator.disconnect()
        return "refused", closed["code"]
    await communicator.disconnect()
    return "events", len(first["events"])


async def _lists_outcome(cookies: str) -> tuple[bool, object]:
    communicator = WebsocketCommunicator(
        application, "/ws/lists/", headers=[(b"origin", b"http://testserver"), (b"cookie", cookies.encode())]
    )
    connected, code = await communicator.connect()
    if not connected:
        return False, code
    first = json.loads((await communicator.receive_output(timeout=5))["text"])
    if first["type"] == "error":
        closed = await communicator.receive_output(timeout=5)
        await communicator.disconnect()
        return False, closed["code"]
    await communicator.disconnect()
    return True, first["type"]


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("role", ROLES)
def test_it_opens_the_lists_socket_to_anyone_with_a_role_somewhere(role: str, scene: ArtifactScene, request: pytest.FixtureRequest) -> None:
    client = client_for(role, request)
    cookies = "; ".join(f"{name}={morsel.value}" for name, morsel in client.cookies.items())
    opened, detail = async_to_sync(_lists_outcome)(cookies)
    if role in VIEWERS | {ELSEWHERE}:
        # It carries no data: each page refetches itself with its viewer's permissions.
        assert opened, (role, detail)
    else:
        assert (opened, detail) == (False, 4401 if role == "anonymous" else 4403)


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("role", ROLES)
def test_it_opens_the_live_trace_socket_only_for_viewers(role: str, scene: ArtifactScene, request: pytest.FixtureRequest) -> None:
    client = client_for(role, request)
    cookies = "; ".join(f"{name}={morsel.value}" for name, morsel in client.cookies.items())
    kind, detail = async_to_sync(_socket_outcome)(cookies, str(scene.run.pk))
    if role in VIEWERS:
        assert kind == "events" and detail == scene.run.last_seq
    elif role == ELSEWHERE:
        assert (kind, detail) == ("refused", 4404)
    else:
        assert kind == "refused" and detail == (4401 if role == "anonymous" else 4403)


@pytest.mark.django_db(transaction=True)
def test_it_rejects_a_socket_from_another_site(scene: ArtifactScene, reviewer: User) -> None:
    client = Client()
    client.force_login(reviewer)
    cookies = "; ".join(f"{name}={morsel.value}" for name, morsel in client.cookies.items())

    async def attempt() -> bool:
        communicator = WebsocketCommunicator(
            application, f"/ws/runs/{scene.run.pk}/", headers=[(b"origin", b"http://evil.example"), (b"cookie", cookies.encode())]
        )
        connected: bool
        connected, _ = await communicator.connect()
        return connected

    assert async_to_sync(attempt)() is False
