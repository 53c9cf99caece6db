"""The live trace of one run over a WebSocket.

The client sends ``{"type": "subscribe", "after_seq": N}``. The consumer joins the
process's feed of the run first (live.feeds: it hears the run's doorbells and reads
what is new from the database once for all the process's viewers), then replays
the events after N from the database in pages, then sends what the feed hands it.
Whatever it sends follows its cursor (the last seq sent) without a gap: a page
that overlaps the cursor is sent from just after it, and when the feed is ahead
of the cursor (its pages came while this socket was replaying) the socket catches
up from the database itself. So a viewer gets every event exactly once, in order,
and only ever from the database.

Server messages: ``events`` (a list of presented events), ``live`` (the replay is
done; with the heartbeat period), ``heartbeat`` (live.lists), ``output`` (the latest
lines of a running call's output: ephemeral, never in the log), ``error`` (names
the problem). Close codes 4401/4403/4404 mean not signed
in, no permission, no such run: the client should not retry those."""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

from channels.db import database_sync_to_async

from common.permissions import VIEW_RUNS
from live import feeds
from live.feeds import Page, RunFeed, replay_page
from live.lists import HeartbeatMixin
from live.session_sockets import current_user, user_group
from projects.access import scoped
from runs.models import Run

log = logging.getLogger(__name__)
NOT_SIGNED_IN, FORBIDDEN, NO_SUCH_RUN = 4401, 4403, 4404


def access_problem(user: Any, run_id: str) -> tuple[int, str] | None:
    if not user.is_authenticated:
        return NOT_SIGNED_IN, "sign in to watch runs"
    if not user.has_perm(VIEW_RUNS):
        return FORBIDDEN, f"this needs the {VIEW_RUNS} permission"
    # A run of another project is as unknown as one that does not exist.
    if not scoped(Run.objects.filter(pk=run_id), user, VIEW_RUNS).exists():
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
        self.feed: RunFeed | None = None  # joined on the first subscribe
        self.cursor: int | None = None  # seq of the last event sent; None until subscribed
        # Events are sent by one holder of the turn at a time, in seq order: the
        # subscribe, a catch-up, or the feed with its page. The feed never waits for
        # the turn: the holder catches up with it before it lets go.
        self.turn = Turn()
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
        if self.filling is not None:
            self.filling.cancel()
        await feeds.leave(RunFeed, self.channel_layer, self.run_id, self)
        if getattr(self, "user_group", None):
            await self.channel_layer.group_discard(self.user_group, self.channel_name)

    async def session_recheck(self, message: dict[str, Any] | None = None) -> bool:
        """Close the socket unless its session still belongs to a user who may watch
        this run (re-read from the database, not the user the socket opened with)."""
        session = self.scope.get("session")
        key = getattr(session, "session_key", None)
        problem = await self.reread(lambda: access_problem(current_user(key), self.run_id), message)
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
            if self.feed is None:
                # Join before reading the database: anything committed after the read
                # is then certain to reach the feed.
                self.feed = await feeds.join(RunFeed, self.channel_layer, self.run_id, self)
                self.start_heartbeat()
            self.cursor = after
            await self.catch_up()
            await self.send_message({"type": "live", "last_seq": self.cursor, "heartbeat_seconds": self.heartbeat_seconds()})
        finally:
            await self.let_go()

    async def catch_up(self) -> None:
        """With the turn: send what follows the cursor up to the feed's mark, from
        the feed's window where it reaches back that far, else from the database,
        page by page. What commits after the mark reaches the feed (its doorbell,
        or its recheck if that is lost) and then this socket."""
        assert self.feed is not None and self.cursor is not None
        while self.cursor < self.feed.mark:
            window = self.feed.window
            if window is not None and window.covers(self.cursor):
                await self.send_page(window)
                continue
            page = await replay_page(self.run_id, self.cursor)
            if page is None:
                return  # nothing readable after the cursor yet (or the log was deleted): the feed's next page or recheck comes back here
            await self.send_page(page)

    async def let_go(self) -> None:
        """Give the turn back. The feed's pages that came while this socket held it
        were not sent: catch up with the feed first."""
        try:
            if self.feed is not None and self.cursor is not None:
                await self.catch_up()
        finally:
            self.turn.give_back()

    async def offer(self, page: Page) -> None:
        """The feed's page, on the feed's task: sent at once from after the cursor,
        or, if the cursor is behind the page, the gap is read from the database on
        a task of this socket's own while the feed goes on to the other viewers."""
        if self.cursor is None or self.cursor >= page.last or not self.turn.try_take():
            return  # nothing new, or the holder of the turn catches up before it lets go
        if page.first <= self.cursor + 1:
            try:
                await self.send_page(page)
            finally:
                self.turn.give_back()
        else:
            self.filling = asyncio.create_task(self.fill())

    async def fill(self) -> None:
        try:
            await self.let_go()
        except Exception:  # the feed's next page or recheck tries again
            log.warning("catching up the trace of run %s failed", self.run_id, exc_info=True)

    async def show_output(self, output: dict[str, Any]) -> None:
        if self.cursor is not None:
            await self.send_message({"type": "output", **output})

    async def send_page(self, page: Page) -> None:
        assert self.cursor is not None
        text = page.text_after(self.cursor)
        self.cursor = page.last
        await self.send(text_data=text)

    async def send_message(self, message: dict[str, Any]) -> None:
        await self.send(text_data=json.dumps(message))
