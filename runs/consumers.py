"""The live trace of one run over a WebSocket.

The client sends ``{"type": "subscribe", "after_seq": N}``. The consumer joins the
run's group first (through the process's hub, runs.fanout, which hands each
broadcast to all of the process's viewers of the run), then replays events after N
from the database in pages, then streams what the group delivers. Whatever arrives twice (committed before the
replay's query, broadcast after the join) is dropped by seq; a gap in the stream
(a lost broadcast) is filled from the database, and so is a lost last broadcast,
by a recheck after an interval without broadcasts. So a viewer gets every event exactly once, in order.

Server messages: ``events`` (a list of presented events), ``live`` (the replay is
done; with the heartbeat period), ``heartbeat`` (runs.live), ``output`` (the latest
lines of a running call's output: ephemeral, never in the log), ``error`` (names
the problem). Close codes 4401/4403/4404 mean not signed
in, no permission, no such run: the client should not retry those."""

from __future__ import annotations

import asyncio
import json
import logging
from collections import OrderedDict
from typing import Any

from channels.db import database_sync_to_async
from django.conf import settings

from common.permissions import VIEW_RUNS
from runs import fanout
from runs.broadcast import run_group
from runs.live import HeartbeatMixin
from runs.models import Run
from runs.session_sockets import current_user, user_group
from runs.views.trace import present, stored_events_after

log = logging.getLogger(__name__)
NOT_SIGNED_IN, FORBIDDEN, NO_SUCH_RUN = 4401, 4403, 4404
ENCODED_CACHE = 512

# Every viewer of a run gets the same events: they are presented and encoded once per
# process, not once per viewer. A run's events are immutable and seq is unique per
# run, so (run, first seq, last seq) names the content. Consumers share one loop.
_encoded: OrderedDict[tuple[str, int, int], str] = OrderedDict()


def encode_events(run_id: str, events: list[dict[str, Any]]) -> str:
    key = (run_id, events[0]["seq"], events[-1]["seq"])
    text = _encoded.get(key)
    if text is None:
        text = _encoded[key] = json.dumps({"type": "events", "events": [present(event) for event in events]})
        if len(_encoded) > ENCODED_CACHE:
            _encoded.popitem(last=False)
    return text


def access_problem(user: Any, run_id: str) -> tuple[int, str] | None:
    if not user.is_authenticated:
        return NOT_SIGNED_IN, "sign in to watch runs"
    if not user.has_perm(VIEW_RUNS):
        return FORBIDDEN, f"this needs the {VIEW_RUNS} permission"
    if not Run.objects.filter(pk=run_id).exists():
        return NO_SUCH_RUN, "no such run"
    return None


def check_subscribe(text: str | None) -> int:
    """The ``after_seq`` of a subscribe message; ValueError names what is wrong."""
    if text is None:
        raise ValueError("send JSON text frames, not binary")
    try:
        message = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"not valid JSON: {exc.msg}") from None
    if not isinstance(message, dict):
        raise ValueError("a message must be a JSON object")
    if message.get("type") != "subscribe":
        raise ValueError("type: the only message type is 'subscribe'")
    after = message.get("after_seq", 0)
    if isinstance(after, bool) or not isinstance(after, int) or after < 0:
        raise ValueError("after_seq: must be a non-negative integer")
    return after


class Turn:
    """A lock whose holder can be told "not now" instead of waiting for it."""

    def __init__(self) -> None:
        self.taken = False
        self._free = asyncio.Event()
        self._free.set()

    def try_take(self) -> bool:
        if self.taken:
            return False
        self.taken = True
        self._free.clear()
        return True

    async def take(self) -> None:
        while not self.try_take():
            await self._free.wait()

    def give_back(self) -> None:
        self.taken = False
        self._free.set()


class RunTraceConsumer(HeartbeatMixin):
    async def connect(self) -> None:
        self.run_id = str(self.scope["url_route"]["kwargs"]["run_id"])
        self.group = run_group(self.run_id)
        self.cursor: int | None = None  # seq of the last event sent; None until subscribed
        self.rechecks: asyncio.Task[None] | None = None
        self.heard = False  # a broadcast arrived since the last recheck
        # Events are sent by one holder of the turn at a time, in seq order: the
        # subscribe, a recheck, or the process's hub (runs.fanout) with a broadcast.
        # The hub never waits for the turn: what it brings meanwhile is held, and the
        # holder sends that too before it lets go.
        self.turn = Turn()
        self.held: list[dict[str, Any]] = []
        self.held_output: dict[str, Any] | None = None
        self.filling: asyncio.Task[None] | None = None
        await self.accept()
        # Accepted first so the client learns why it is refused and stops retrying.
        problem = await database_sync_to_async(access_problem)(self.scope["user"], self.run_id)
        if problem is not None:
            await self.refuse(problem)
            return
        # The user's group hears of sign-out, role changes and deactivation (session_sockets).
        self.user_group = user_group(self.scope["user"].pk)
        await self.channel_layer.group_add(self.user_group, self.channel_name)

    async def refuse(self, problem: tuple[int, str]) -> None:
        code, message = problem
        await self.send_message({"type": "error", "error": message})
        await self.close(code=code)

    async def disconnect(self, code: int) -> None:
        self.stop_heartbeat()
        for task in (self.rechecks, self.filling):
            if task is not None:
                task.cancel()
        await fanout.leave(self.channel_layer, self.group, self)
        if getattr(self, "user_group", None):
            await self.channel_layer.group_discard(self.user_group, self.channel_name)

    async def session_recheck(self, message: dict[str, Any] | None = None) -> bool:
        """Close the socket unless its session still belongs to a user who may watch
        this run (re-read from the database, not the user the socket opened with)."""
        session = self.scope.get("session")
        key = getattr(session, "session_key", None)
        problem = await database_sync_to_async(lambda: access_problem(current_user(key), self.run_id))()
        if problem is None:
            return True
        if problem[0] == NOT_SIGNED_IN:
            problem = (NOT_SIGNED_IN, "signed out (or the account changed); sign in again to watch runs")
        await self.refuse(problem)
        return False

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        try:
            after = check_subscribe(text_data)
        except ValueError as exc:
            await self.send_message({"type": "error", "error": str(exc)})
            return
        await self.turn.take()
        try:
            if self.cursor is None:
                # Join before reading the database: anything committed after the read is
                # then certain to arrive through the group.
                await fanout.join(self.channel_layer, self.group, self)
                self.rechecks = asyncio.create_task(self.recheck_periodically())
                self.start_heartbeat()
            self.cursor = after
            await self.catch_up()
            await self.send_message({"type": "live", "last_seq": self.cursor, "heartbeat_seconds": self.heartbeat_seconds()})
        finally:
            await self.send_held()

    async def catch_up(self) -> None:
        """Send every stored event after the cursor, page by page."""
        while True:
            page = await database_sync_to_async(stored_events_after)(self.run_id, self.cursor)
            if not page:
                return
            await self.send_events(page)

    async def recheck_periodically(self) -> None:
        # A gap shows when the next broadcast arrives; a lost *last* broadcast (the
        # run's stop, say) has no next one. The check goes through this consumer's own
        # channel, after its other messages, and sends only with the turn.
        # While broadcasts keep arriving a lost one shows as a gap anyway, so the
        # database is read only after an interval with none: with many viewers,
        # reads every interval were a periodic stall of the live stream.
        while True:
            await asyncio.sleep(settings.HARNESS_TRACE_RECHECK_SECONDS)
            if self.heard:
                self.heard = False
                continue
            await self.channel_layer.send(self.channel_name, {"type": "trace.recheck"})

    async def trace_recheck(self, message: dict[str, Any]) -> None:
        if await self.session_recheck():
            await self.turn.take()
            try:
                await self.catch_up()
            finally:
                await self.send_held()

    async def hear(self, message: dict[str, Any]) -> None:
        """A message to the run's group, from the hub (runs.fanout): on the hub's task,
        so it never waits for the turn or the database."""
        if message["type"] == "run.output":
            if self.cursor is None:
                return
            # Only the latest output matters; while the turn is taken it waits, so it
            # does not overtake the events held before it.
            self.held_output = message["output"]
            if self.turn.try_take():
                await self.send_held()
            return
        if message["type"] != "run.events" or self.cursor is None:
            return
        self.heard = True
        self.held += message["events"]
        if not self.turn.try_take():
            return  # the holder sends these before it lets go
        first = min((event["seq"] for event in self.held if event["seq"] > self.cursor), default=None)
        if first is None or first == self.cursor + 1:
            await self.send_held()
        else:
            # A gap (a lost broadcast): filled from the database on a task of this
            # socket's own, while the hub goes on to the other viewers.
            self.filling = asyncio.create_task(self.fill_gap())

    async def fill_gap(self) -> None:
        try:
            await self.send_held()
        except Exception:  # noqa: BLE001 - the next broadcast or recheck tries again
            log.warning("filling a gap in the trace of run %s failed", self.run_id, exc_info=True)

    async def send_held(self) -> None:
        """With the turn: send the held events in seq order, each once, filling any
        gap before them from the database, and the latest held output; then give the
        turn back."""
        try:
            while self.held or self.held_output is not None:
                assert self.cursor is not None
                if not self.held and self.held_output is not None:
                    output, self.held_output = self.held_output, None
                    await self.send_message({"type": "output", **output})
                    continue
                cursor = self.cursor
                fresh = sorted({event["seq"]: event for event in self.held if event["seq"] > cursor}.values(), key=lambda e: e["seq"])
                self.held = []
                if fresh and fresh[0]["seq"] != cursor + 1:
                    await self.catch_up()
                    fresh = [event for event in fresh if event["seq"] > self.cursor]
                if fresh:
                    await self.send_events(fresh)
        finally:
            self.turn.give_back()

    async def send_events(self, events: list[dict[str, Any]]) -> None:
        self.cursor = events[-1]["seq"]
        await self.send(text_data=encode_events(self.run_id, events))

    async def send_message(self, message: dict[str, Any]) -> None:
        await self.send(text_data=json.dumps(message))
