"""The live trace over the real Redis channel layer: a subscriber gets the replay
and then the live stream, every event exactly once and in order, also while events
are written during the replay, after a lost broadcast, and across a reconnect."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from channels.db import database_sync_to_async
from channels.layers import get_channel_layer
from channels.testing import WebsocketCommunicator
from django.contrib.auth.models import User
from django.db import connection
from django.test import Client
from pytest_django import Settings

from core import events as ev
from core.fences import RowLock
from harness_site.asgi import application
from live import fanout, feeds
from runs.models import Run
from runs.persistence import eventlog
from runs.persistence.broadcast import run_group
from runs.persistence.eventlog import append_events
from tests.fixtures_services import service_env
from tests.fixtures_web import Scene, waiting_scene

pytestmark = pytest.mark.django_db(transaction=True)


def notes(run_id: str, count: int, batch: int = 1) -> None:
    for start in range(0, count, batch):
        size = min(batch, count - start)
        append_events(
            run_id,
            [ev.ModelNote(run_id=run_id, seq=0, ts=time.time(), kind="note", detail={"n": start + i}) for i in range(size)],
            fence=RowLock("a test's writer"),
        )


def session_cookie(user: User) -> bytes:
    client = Client()
    client.force_login(user)
    return "; ".join(f"{name}={morsel.value}" for name, morsel in client.cookies.items()).encode()


def socket(cookie: bytes, run_id: str) -> WebsocketCommunicator:
    return WebsocketCommunicator(application, f"/ws/runs/{run_id}/", headers=[(b"origin", b"http://127.0.0.1"), (b"cookie", cookie)])


async def receive_until(communicator: WebsocketCommunicator, last_seq: int, timeout: float = 20) -> tuple[list[int], bool]:
    """Seqs received until ``last_seq`` arrives, and whether ``live`` was announced."""
    seqs: list[int] = []
    live = False
    deadline = time.monotonic() + timeout
    while not seqs or seqs[-1] < last_seq:
        message = await communicator.receive_json_from(timeout=max(0.1, deadline - time.monotonic()))
        if message["type"] == "events":
            seqs += [event["seq"] for event in message["events"]]
        elif message["type"] == "live":
            live = True
        elif message["type"] != "heartbeat":
            raise AssertionError(message)
    return seqs, live


@pytest.fixture
def scene(operator: User) -> Scene:
    return waiting_scene(operator)


def test_it_replays_then_streams_with_no_gap_or_duplicate_while_events_are_written(scene: Scene, reviewer: User) -> None:
    cookie = session_cookie(reviewer)
    run_id = str(scene.run.pk)
    notes(run_id, 1200, batch=100)  # more than two replay pages
    written: dict[str, int] = {}
    went_live = threading.Event()

    def writer() -> None:
        # Writing goes on until the viewer is live, so the replay and the stream both
        # overlap the writes however fast either side is.
        try:
            count = 0
            while count < 600 or not went_live.is_set():
                notes(run_id, 3, batch=3)
                count += 3
            written["last_seq"] = Run.objects.get(pk=run_id).last_seq
        finally:
            connection.close()

    async def watch() -> tuple[list[int], bool]:
        communicator = socket(cookie, run_id)
        connected, _ = await communicator.connect()
        assert connected
        thread = threading.Thread(target=writer)
        thread.start()
        await communicator.send_json_to({"type": "subscribe", "after_seq": 0})
        seqs: list[int] = []
        deadline = time.monotonic() + 60
        while thread.is_alive() and time.monotonic() < deadline:
            message = await communicator.receive_json_from(timeout=20)
            if message["type"] == "events":
                seqs += [event["seq"] for event in message["events"]]
            elif message["type"] == "live":
                went_live.set()
        thread.join()
        more, _ = await receive_until(communicator, written["last_seq"]) if seqs[-1] < written["last_seq"] else ([], True)
        await communicator.disconnect()
        return seqs + more, went_live.is_set()

    seqs, live = async_to_sync(watch)()
    final = Run.objects.get(pk=run_id).last_seq
    assert seqs == list(range(1, final + 1))
    assert live and final > 1800


def test_it_fills_a_lost_broadcast_from_the_database(scene: Scene, reviewer: User, monkeypatch: pytest.MonkeyPatch) -> None:
    cookie = session_cookie(reviewer)
    run_id = str(scene.run.pk)
    start = scene.run.last_seq

    async def watch() -> list[int]:
        communicator = socket(cookie, run_id)
        await communicator.connect()
        await communicator.send_json_to({"type": "subscribe", "after_seq": start})
        assert (await communicator.receive_json_from(timeout=5)) == {"type": "live", "last_seq": start, "heartbeat_seconds": 5.0}
        # A broadcast lost on the way (a Redis hiccup, a full channel): only the
        # next event's broadcast arrives, and the viewer still gets both.
        with monkeypatch.context() as lost:
            lost.setattr(eventlog, "ring_doorbell", lambda run_id, last_seq: None)
            await database_sync_to_async(notes)(run_id, 1)
        await database_sync_to_async(notes)(run_id, 1)
        seqs, _ = await receive_until(communicator, start + 2)
        await communicator.disconnect()
        return seqs

    assert async_to_sync(watch)() == [start + 1, start + 2]


def test_it_delivers_a_lost_last_broadcast_by_rechecking(
    scene: Scene, reviewer: User, monkeypatch: pytest.MonkeyPatch, settings: Settings
) -> None:
    settings.HARNESS_TRACE_RECHECK_SECONDS = 0.3
    cookie = session_cookie(reviewer)
    run_id = str(scene.run.pk)
    start = scene.run.last_seq

    async def watch() -> list[int]:
        communicator = socket(cookie, run_id)
        await communicator.connect()
        await communicator.send_json_to({"type": "subscribe", "after_seq": start})
        await communicator.receive_json_from(timeout=5)  # live
        # The run's last event, and its broadcast is lost: no later one will show the gap.
        with monkeypatch.context() as lost:
            lost.setattr(eventlog, "ring_doorbell", lambda run_id, last_seq: None)
            await database_sync_to_async(notes)(run_id, 1)
        seqs, _ = await receive_until(communicator, start + 1, timeout=5)
        await communicator.disconnect()
        return seqs

    assert async_to_sync(watch)() == [start + 1]


def test_it_resumes_after_a_reconnect_from_the_seq_the_client_has(scene: Scene, reviewer: User) -> None:
    cookie = session_cookie(reviewer)
    run_id = str(scene.run.pk)

    async def first_visit() -> list[int]:
        communicator = socket(cookie, run_id)
        await communicator.connect()
        await communicator.send_json_to({"type": "subscribe", "after_seq": 0})
        seqs, _ = await receive_until(communicator, scene.run.last_seq)
        await communicator.disconnect()
        return seqs

    async def second_visit(after: int, last: int) -> list[int]:
        communicator = socket(cookie, run_id)
        await communicator.connect()
        await communicator.send_json_to({"type": "subscribe", "after_seq": after})
        seqs, _ = await receive_until(communicator, last)
        assert (await communicator.receive_json_from(timeout=5)) == {"type": "live", "last_seq": last, "heartbeat_seconds": 5.0}
        await database_sync_to_async(notes)(run_id, 2)  # and the stream goes on live
        more, _ = await receive_until(communicator, last + 2)
        await communicator.disconnect()
        return seqs + more

    seen = async_to_sync(first_visit)()
    assert seen == list(range(1, scene.run.last_seq + 1))
    notes(run_id, 25, batch=5)  # while the client is away
    last = Run.objects.get(pk=run_id).last_seq
    assert async_to_sync(second_visit)(seen[-1], last) == list(range(seen[-1] + 1, last + 3))


def test_it_streams_to_many_viewers_of_a_run_through_one_subscription_and_one_read_each_event_once(
    scene: Scene, reviewer: User, monkeypatch: pytest.MonkeyPatch
) -> None:
    cookie = session_cookie(reviewer)
    run_id = str(scene.run.pk)
    start = scene.run.last_seq
    reads: list[int] = []
    real_read = feeds.read_page

    def counted(run: str, after: int) -> feeds.Page | None:
        reads.append(after)
        return real_read(run, after)

    monkeypatch.setattr(feeds, "read_page", counted)

    async def watch() -> tuple[list[list[int]], list[int], int, bool]:
        viewers = [socket(cookie, run_id) for _ in range(5)]
        for viewer in viewers:
            await viewer.connect()
            await viewer.send_json_to({"type": "subscribe", "after_seq": start})
            assert (await viewer.receive_json_from(timeout=5))["type"] == "live"
        layer = get_channel_layer()
        members = len(layer._get_layer().groups[f"{layer._get_layer().prefix}__group__{run_group(run_id)}"])
        reads.clear()
        await database_sync_to_async(notes)(run_id, 6, batch=2)
        first, _ = await receive_until(viewers[0], start + 6)
        await viewers[0].disconnect()  # one leaves; the others' stream goes on
        await database_sync_to_async(notes)(run_id, 6, batch=3)
        rest = [await receive_until(viewer, start + 12) for viewer in viewers[1:]]
        for viewer in viewers[1:]:
            await viewer.disconnect()
        left = not any(group == run_group(run_id) for _, group in fanout._hubs) and not any(key == run_id for _, _, key in feeds._feeds)
        return [seqs for seqs, _ in rest], first, members, left

    rest, first, members, left = async_to_sync(watch)()
    # Five doorbells: the process's feed reads for each once at most (and once more
    # when one rang during a read), however many viewers there are.
    assert 0 < len(reads) <= 10, reads
    assert first == list(range(start + 1, start + 7))
    assert rest == [list(range(start + 1, start + 13))] * 4
    assert members == 1, "the process joins the run's group once, not once per viewer"
    assert left, "the subscription ends with the last viewer"


@pytest.mark.parametrize(
    "frame,problem",
    [
        ("not json", "not valid JSON"),
        ("[1, 2]", "a message must be a JSON object"),
        ('{"type": "unsubscribe"}', "type: the only message type is 'subscribe'"),
        ('{"type": "subscribe", "after_seq": -1}', "after_seq: must be a non-negative integer"),
        ('{"type": "subscribe", "after_seq": "7"}', "after_seq: must be a non-negative integer"),
        ('{"type": "subscribe", "after_seq": true}', "after_seq: must be a non-negative integer"),
        (b"\x00binary", "send JSON text frames, not binary"),
    ],
)
def test_it_answers_a_malformed_message_with_the_problem_and_stays_open(
    frame: str | bytes, problem: str, scene: Scene, reviewer: User
) -> None:
    cookie = session_cookie(reviewer)
    run_id = str(scene.run.pk)

    async def talk() -> tuple[dict[str, Any], list[int]]:
        communicator = socket(cookie, run_id)
        await communicator.connect()
        if isinstance(frame, bytes):
            await communicator.send_to(bytes_data=frame)
        else:
            await communicator.send_to(text_data=frame)
        error = await communicator.receive_json_from(timeout=5)
        await communicator.send_json_to({"type": "subscribe", "after_seq": 0})
        seqs, _ = await receive_until(communicator, scene.run.last_seq)
        await communicator.disconnect()
        return error, seqs

    error, seqs = async_to_sync(talk)()
    assert error["type"] == "error" and problem in error["error"]
    assert seqs == list(range(1, scene.run.last_seq + 1))


def test_it_refuses_a_socket_for_a_run_that_does_not_exist(reviewer: User) -> None:
    cookie = session_cookie(reviewer)

    async def talk() -> tuple[dict[str, Any], int]:
        communicator = socket(cookie, "00000000-0000-0000-0000-000000000000")
        await communicator.connect()
        error = await communicator.receive_json_from(timeout=5)
        closed = await communicator.receive_output(timeout=5)
        return error, closed["code"]

    error, code = async_to_sync(talk)()
    assert error == {"type": "error", "error": "no such run"} and code == 4404


def test_it_shows_tokens_and_cost_against_the_budget_for_a_model_run(db: None) -> None:
    from pages.summary import model_budgets
    from tests.helpers import World

    run = World().create()
    assert model_budgets(run, {}) == []  # a scripted run has no model budget
    run.proposer = {"kind": "openai", "model": "gpt-4o-mini", "max_tokens": 1000, "max_cost_usd": 0.5}
    snapshot = {
        "usage": {"requests": 2, "input_tokens": 300, "output_tokens": 100, "cost_usd": 0.00011},
        "budget": {"max_tokens": 1000, "max_cost_usd": 0.5},
    }
    tokens, cost = model_budgets(run, snapshot)
    assert (tokens["name"], tokens["used"], tokens["limit"], tokens["ratio"]) == ("tokens", 400, 1000.0, 0.4)
    assert (cost["name"], cost["used"], cost["limit"], cost["unit"]) == ("cost", 0.0001, 0.5, " USD")


def test_it_web_process_has_the_hidden_characters_class_before_its_first_viewer() -> None:
    """The class of hidden characters every presented event is searched with (core.visible)
    takes a pass over every code point to build: built by the first feed's first read,
    it held the interpreter's lock for 0.16 s or more while every socket waited. The
    web process (harness_site.asgi, a fresh interpreter here) has it before it serves."""
    said = (
        "import harness_site.asgi; from core import visible; "
        "print(visible._hidden.cache_info().currsize, visible._ascii_suspects.cache_info().currsize)"
    )
    built = subprocess.run([sys.executable, "-c", said], env=service_env(), capture_output=True, text=True, timeout=120, check=True)
    assert built.stdout.split()[-2:] == ["1", "1"], built.stdout + built.stderr
