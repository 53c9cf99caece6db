"""What keeps the pages live, below the browser: heartbeats on every socket, the lists
socket, a running call's output (throttled, capped, redacted, never stored), and what
each web process's feeds hand on and join."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from channels.db import database_sync_to_async
from channels.layers import get_channel_layer
from channels.testing import WebsocketCommunicator
from django.contrib.auth.models import User
from pytest_django import Settings

from core import events as ev
from core.fences import RowLock
from harness_site.asgi import application
from live import fanout
from live.feeds import Page, contiguous_after
from projects.models import Project
from runs.persistence import eventlog
from runs.persistence.broadcast import (
    DOORBELLS_GROUP,
    broadcast_lists_changed,
    broadcast_output,
    coalesce,
    flush_broadcasts,
    ring_doorbell,
    run_group,
)
from runs.persistence.eventlog import append_events
from runs.persistence.live_output import LiveOutput
from tests.fixtures_web import waiting_scene
from tests.helpers import World
from tests.test_live_trace import session_cookie

ORIGIN = (b"origin", b"http://127.0.0.1")


def lists_socket(cookie: bytes) -> WebsocketCommunicator:
    return WebsocketCommunicator(application, "/ws/lists/", headers=[ORIGIN, (b"cookie", cookie)])


def trace_socket(cookie: bytes, run_id: str) -> WebsocketCommunicator:
    return WebsocketCommunicator(application, f"/ws/runs/{run_id}/", headers=[ORIGIN, (b"cookie", cookie)])


async def next_of(communicator: WebsocketCommunicator, kind: str, timeout: float = 10) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        message: dict[str, Any] = await communicator.receive_json_from(timeout=max(0.1, deadline - time.monotonic()))
        if message["type"] == kind:
            return message


# -- the running call's output ----------------------------------------------------------


def test_it_publishes_a_running_calls_last_lines_throttled_capped_and_redacted(settings: Settings) -> None:
    settings.HARNESS_SECRET_VALUES = ["hunter2-very-secret"]
    sent: list[dict[str, Any]] = []
    now = [100.0]
    live = LiveOutput("run-1", "c2", publish=lambda run_id, output: sent.append(output), interval=0.3, max_lines=3, clock=lambda: now[0])
    live.write(b"one\n")
    assert [s["lines"] for s in sent] == [["one"]], "the first chunk goes out at once"
    live.write(b"two\nthree\n")
    live.write(b"four\ntoken hunter2-very-secret sk-abcdefghijklmnopqrstuvwx\n")
    assert len(sent) == 1, "chunks inside the interval wait for it to end"
    deadline = time.monotonic() + 10
    while len(sent) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(sent) == 2, "the last chunk before a quiet spell is still sent"
    assert sent[-1]["lines"] == ["three", "four", "token [redacted] [redacted]"]
    assert sent[-1]["call_id"] == "c2" and sent[-1]["total_bytes"] == 4 + 10 + len(
        b"four\ntoken hunter2-very-secret sk-abcdefghijklmnopqrstuvwx\n"
    )
    now[0] += 1
    live.write(b"five\n")  # the interval is over: at once
    live.write(b"six\n")  # held for the next interval...
    live.close()  # ...which never comes: the call ended
    time.sleep(0.6)
    assert [s["lines"][-1] for s in sent[2:]] == ["five"], "nothing is sent once the call's output is closed"


def test_it_caps_a_single_huge_line() -> None:
    sent: list[dict[str, Any]] = []
    live = LiveOutput("run-1", "c1", publish=lambda run_id, output: sent.append(output), max_chars=100)
    live.write(b"x" * 10_000)
    assert len("".join(sent[0]["lines"])) == 100


# -- sockets --------------------------------------------------------------------------------


async def opened(communicator: WebsocketCommunicator, subscribe_after: int | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
    """Connect (and subscribe to a run's trace); the ``live`` message and the first heartbeat."""
    connected, _ = await communicator.connect()
    assert connected
    if subscribe_after is not None:
        await communicator.send_json_to({"type": "subscribe", "after_seq": subscribe_after})
    live = await next_of(communicator, "live")
    return live, await next_of(communicator, "heartbeat", timeout=3)


@pytest.fixture
def quick_beats(settings: Settings) -> float:
    settings.HARNESS_LIVE_HEARTBEAT_SECONDS = 0.2
    return 0.2


@pytest.mark.django_db(transaction=True)
def test_it_sends_heartbeats_and_running_output_on_the_trace_socket(operator: User, reviewer: User, quick_beats: float) -> None:
    scene = waiting_scene(operator)
    run_id = str(scene.run.pk)
    communicator = trace_socket(session_cookie(reviewer), run_id)

    async def watch() -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
        live, beat = await opened(communicator, scene.run.last_seq)
        broadcast_output(run_id, {"call_id": "c9", "lines": ["<b>tick</b>"], "total_bytes": 12})
        output = await next_of(communicator, "output")
        await communicator.disconnect()
        return live, beat, output

    live, beat, output = async_to_sync(watch)()
    assert live["heartbeat_seconds"] == quick_beats and beat == {"type": "heartbeat"}
    assert output == {"type": "output", "call_id": "c9", "lines": ["<b>tick</b>"], "total_bytes": 12}


@pytest.mark.django_db(transaction=True)
def test_it_tells_the_list_pages_when_a_run_changes(operator: User, reviewer: User, quick_beats: float) -> None:
    scene = waiting_scene(operator)
    run_id = str(scene.run.pk)
    communicator = lists_socket(session_cookie(reviewer))

    @database_sync_to_async  # type: ignore[untyped-decorator]  # channels ships no types
    def note() -> None:
        append_events(
            run_id, [ev.ModelNote(run_id=run_id, seq=0, ts=time.time(), kind="note", detail={})], fence=RowLock("a test's writer")
        )

    async def watch() -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
        live, beat = await opened(communicator)
        await note()
        changed = await next_of(communicator, "changed")
        await communicator.disconnect()
        return live, beat, changed

    live, beat, changed = async_to_sync(watch)()
    assert live["heartbeat_seconds"] == quick_beats and beat["type"] == "heartbeat"
    assert changed == {"type": "changed"}


def waiting_now(communicator: WebsocketCommunicator) -> list[dict[str, Any]]:
    """The messages already sent to ``communicator`` (heartbeats left out), without waiting."""
    queue = communicator.output_queue
    sent = [queue.get_nowait() for _ in range(queue.qsize())]
    return [m for m in (json.loads(s["text"]) for s in sent if s["type"] == "websocket.send") if m["type"] != "heartbeat"]


@pytest.mark.django_db(transaction=True)
def test_it_tells_a_list_socket_nothing_of_runs_its_viewer_cannot_see(
    admin_user: User, other_member: User, other_project: Project, quick_beats: float
) -> None:
    mine, theirs = World().create(project_id=other_project.pk), World().create()
    member = lists_socket(session_cookie(other_member))
    # A site admin sees both projects' runs; told after the member (a feed tells its
    # viewers one after the other, in the order they joined).
    witness = lists_socket(session_cookie(admin_user))

    @database_sync_to_async  # type: ignore[untyped-decorator]  # channels ships no types
    def note(run_id: str) -> None:
        append_events(
            run_id, [ev.ModelNote(run_id=run_id, seq=0, ts=time.time(), kind="note", detail={})], fence=RowLock("a test's writer")
        )

    async def watch() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        await opened(member)
        await opened(witness)
        await note(str(theirs.pk))  # the default project's run: not the member's
        await next_of(witness, "changed")
        after_theirs = waiting_now(member)
        await note(str(mine.pk))
        await next_of(witness, "changed")
        after_mine = waiting_now(member)
        await member.disconnect()
        await witness.disconnect()
        return after_theirs, after_mine

    after_theirs, after_mine = async_to_sync(watch)()
    assert after_theirs == [], "a change in another project reached the member's lists socket"
    assert after_mine == [{"type": "changed"}]


@pytest.mark.django_db(transaction=True)
def test_it_tells_the_list_pages_of_a_change_whose_doorbell_was_lost(
    operator: User, reviewer: User, settings: Settings, monkeypatch: pytest.MonkeyPatch, quick_beats: float
) -> None:
    settings.HARNESS_TRACE_RECHECK_SECONDS = 0.3
    scene = waiting_scene(operator)
    run_id = str(scene.run.pk)
    communicator = lists_socket(session_cookie(reviewer))

    @database_sync_to_async  # type: ignore[untyped-decorator]  # channels ships no types
    def note() -> None:
        with monkeypatch.context() as lost:
            lost.setattr(eventlog, "ring_doorbell", lambda run_id, last_seq: None)
            append_events(
                run_id, [ev.ModelNote(run_id=run_id, seq=0, ts=time.time(), kind="note", detail={})], fence=RowLock("a test's writer")
            )

    async def watch() -> dict[str, Any]:
        await opened(communicator)
        await note()
        changed = await next_of(communicator, "changed", timeout=5)
        await communicator.disconnect()
        return changed

    assert async_to_sync(watch)() == {"type": "changed"}


@pytest.mark.django_db(transaction=True)
def test_it_refuses_the_lists_socket_to_visitors_without_a_role(outsider: User) -> None:
    cookie = session_cookie(outsider)

    async def watch() -> tuple[dict[str, Any], dict[str, Any]]:
        communicator = lists_socket(cookie)
        await communicator.connect()
        error = await communicator.receive_json_from(timeout=5)
        closed = await communicator.receive_output(timeout=5)
        return error, closed

    error, closed = async_to_sync(watch)()
    assert error["type"] == "error" and "permission" in error["error"]
    assert closed == {"type": "websocket.close", "code": 4403}


def test_it_hands_on_only_events_that_follow_the_mark_without_a_gap() -> None:
    assert contiguous_after(4, [5, 6, 7, 9, 10]) == 3
    assert contiguous_after(4, [6, 7]) == 0
    assert contiguous_after(0, []) == 0
    page = Page(5, ['{"seq": 5}', '{"seq": 6}', '{"seq": 7}'], full=False)
    assert page.last == 7
    assert page.text_after(4) == '{"type": "events", "events": [{"seq": 5},{"seq": 6},{"seq": 7}]}'
    assert page.text_after(6) == '{"type": "events", "events": [{"seq": 7}]}'


class Heard:
    def __init__(self) -> None:
        self.messages: list[dict[str, Any]] = []

    async def hear(self, message: dict[str, Any]) -> None:
        self.messages.append(message)


def test_it_hands_a_runs_doorbell_to_the_listeners_of_that_run_and_to_those_of_every_run() -> None:
    layer = get_channel_layer()

    async def watch() -> tuple[list[dict[str, Any]], ...]:
        of_a, of_b, every = Heard(), Heard(), Heard()
        await fanout.join(layer, DOORBELLS_GROUP, of_a, "run-a")
        await fanout.join(layer, DOORBELLS_GROUP, of_b, "run-b")
        await fanout.join(layer, DOORBELLS_GROUP, every)
        await layer.group_send(DOORBELLS_GROUP, {"type": "run.doorbell", "run_id": "run-b", "last_seq": 4})
        await layer.group_send(DOORBELLS_GROUP, {"type": "lists.changed", "reason": "switch"})
        deadline = time.monotonic() + 5
        while len(every.messages) < 2 and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        for listener in (of_a, of_b, every):
            await fanout.leave(layer, DOORBELLS_GROUP, listener)
        return of_a.messages, of_b.messages, every.messages

    of_a, of_b, every = async_to_sync(watch)()
    bell = {"type": "run.doorbell", "run_id": "run-b", "last_seq": 4}
    assert every == [bell, {"type": "lists.changed", "reason": "switch"}]
    assert of_b == [bell], "a run's listener hears its run's doorbells only"
    assert of_a == []
    assert not any(group == DOORBELLS_GROUP for _, group in fanout._hubs), "the last to leave closes the hub"


def test_it_delivers_what_the_broadcasting_thread_publishes_to_the_channel_layers_subscribers() -> None:
    # The thread publishes with redis-py on the layer's group channels, in the layer's
    # format: a subscription made through the layer hears it as the layer's own.
    layer = get_channel_layer()

    async def watch() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        every, outputs = Heard(), Heard()
        await fanout.join(layer, DOORBELLS_GROUP, every)
        await fanout.join(layer, run_group("run-c"), outputs)
        ring_doorbell("run-c", 3)
        broadcast_lists_changed("switch")
        broadcast_output("run-c", {"call_id": "c1", "lines": ["tick"], "total_bytes": 4})
        assert await asyncio.to_thread(flush_broadcasts)
        deadline = time.monotonic() + 5
        while (len(every.messages) < 2 or not outputs.messages) and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        await fanout.leave(layer, DOORBELLS_GROUP, every)
        await fanout.leave(layer, run_group("run-c"), outputs)
        return every.messages, outputs.messages

    every, outputs = async_to_sync(watch)()
    assert every == [{"type": "run.doorbell", "run_id": "run-c", "last_seq": 3}, {"type": "lists.changed", "reason": "switch"}]
    assert outputs == [{"type": "run.output", "output": {"call_id": "c1", "lines": ["tick"], "total_bytes": 4}}]


def test_it_joins_what_queued_up_per_group_into_the_latest_doorbell_and_output() -> None:
    def doorbell(run: str, seq: int) -> tuple[str, dict[str, Any]]:
        return DOORBELLS_GROUP, {"type": "run.doorbell", "run_id": run, "last_seq": seq}

    def output(call: str, line: str) -> tuple[str, dict[str, Any]]:
        return "run.a", {"type": "run.output", "output": {"call_id": call, "lines": [line]}}

    changed = (DOORBELLS_GROUP, {"type": "lists.changed", "reason": "switch"})
    queued = [
        doorbell("a", 3),
        changed,
        doorbell("b", 7),  # another run's, in the same group: a message of its own
        output("c1", "x"),
        doorbell("a", 9),  # another process rang for 4 to 8 meanwhile: 9 says they are committed too
        output("c2", "z"),
        output("c1", "y"),
        changed,
        doorbell("a", 5),  # a late one changes nothing
    ]
    assert coalesce(queued) == [doorbell("a", 9), changed, doorbell("b", 7), output("c1", "y"), output("c2", "z")]
