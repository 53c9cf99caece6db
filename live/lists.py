"""What every live socket shares, and the socket of the list pages.

A page can only tell a quiet run from a dead connection if the server speaks at a
known rhythm: every socket sends ``{"type": "heartbeat"}`` every
``HARNESS_LIVE_HEARTBEAT_SECONDS`` and announces that period when it goes live, so a
page that hears nothing for two periods says so ("no updates since ...").

The lists socket (``/ws/lists/``) tells the runs list, the approvals inbox and the
control page that something they show changed (``{"type": "changed"}``). It carries
no data: the page refetches itself with the viewer's own permissions, and it also
refetches on every (re)connect, so a change made while it was away is never missed.
What it is told comes from the database too: the process's lists feed (live.feeds)
reads the lists' version on a doorbell and after an interval without one, and each
socket says "changed" when the part of the version its viewer may see (the projects
where they may view runs or approvals, and the global switch) moved past what its
page was last told, so a lost doorbell delays a refetch, never skips it, and another
project's busy runs are never heard of.
Like the trace socket, it follows its session (live.session_sockets): told that its
user changed, it re-reads the session and closes when the user may no longer see the
lists."""

from __future__ import annotations

import asyncio
import json
import random
from abc import ABC, abstractmethod
from collections.abc import Callable, Hashable
from typing import Any, TypeVar

from channels.consumer import get_handler_name
from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncWebsocketConsumer
from django.conf import settings

from common.permissions import VIEW_APPROVALS, VIEW_RUNS
from live import feeds
from live.session_sockets import current_user, user_group
from projects.access import project_ids_with

NOT_SIGNED_IN, FORBIDDEN = 4401, 4403
R = TypeVar("R")


class HeartbeatMixin(AsyncWebsocketConsumer, ABC):
    heartbeats: asyncio.Task[None] | None = None

    async def dispatch(self, message: dict[str, Any]) -> None:
        """Channels' dispatch first closes stale database connections, with a hop to
        the one thread that runs sync code, for every message of every viewer: at
        200 events/s to 20 viewers that queue on one thread was the trace's tail.
        No handler of a live socket uses the database outside ``database_sync_to_async``,
        which closes stale connections around each call itself."""
        handler = getattr(self, get_handler_name(message), None)
        if handler is None:
            raise ValueError(f"no handler for message type {message['type']}")
        await handler(message)

    def start_heartbeat(self) -> None:
        if self.heartbeats is None:
            self.heartbeats = asyncio.create_task(self._beat())

    def stop_heartbeat(self) -> None:
        if self.heartbeats is not None:
            self.heartbeats.cancel()

    def heartbeat_seconds(self) -> float:
        return float(settings.HARNESS_LIVE_HEARTBEAT_SECONDS)

    async def _beat(self) -> None:
        # Through the consumer's own channel, so a beat goes out between messages,
        # never in the middle of a replay. The first beat comes after a random part of
        # the period: sockets that opened together (every page reconnecting after a
        # restart) would otherwise beat, and re-read their sessions through the one
        # database thread, all at once for good: a stall of the live streams.
        await asyncio.sleep(random.random() * self.heartbeat_seconds())
        while True:
            await self.channel_layer.send(self.channel_name, {"type": "live.heartbeat"})
            await asyncio.sleep(self.heartbeat_seconds())

    @abstractmethod
    async def session_recheck(self, message: dict[str, Any] | None = None) -> bool:
        """Close the socket unless its session still allows what it shows; True if
        it stays open. Also the handler of the notice that its user changed
        (live.session_sockets)."""

    async def reread(self, read: Callable[[], R], message: dict[str, Any] | None) -> R:
        """``read`` (the session and what it allows, from the database) for
        ``session_recheck``: at a beat (no ``message``) on the feeds' rechecks thread,
        whose connection is kept while the socket beats (it is in a feed); for the
        notice, which may come before the socket is in a feed, as its other reads."""
        if message is None:
            return await feeds.on_recheck_thread(read)
        result: R = await database_sync_to_async(read)()
        return result

    async def live_heartbeat(self, message: dict[str, Any]) -> None:
        # Each beat re-reads the session too: the per-user notice (session_sockets)
        # closes a socket at once, but it travels by Redis pub/sub, which can drop it.
        if await self.session_recheck():
            await self.send(text_data=json.dumps({"type": "heartbeat"}))


def lists_projects(user: Any) -> frozenset[int] | None:
    """The projects whose runs or approvals ``user`` may see (None: every project)."""
    runs, approvals = project_ids_with(user, VIEW_RUNS), project_ids_with(user, VIEW_APPROVALS)
    if runs is None or approvals is None:
        return None
    return frozenset(runs) | frozenset(approvals)


def lists_access_problem(user: Any) -> tuple[int, str] | None:
    if not user.is_authenticated:
        return NOT_SIGNED_IN, "sign in to watch runs"
    if not (user.has_perm(VIEW_RUNS) or user.has_perm(VIEW_APPROVALS)):
        return FORBIDDEN, f"this needs the {VIEW_RUNS} or {VIEW_APPROVALS} permission"
    return None


class ListsConsumer(HeartbeatMixin):
    user_group = ""
    # The projects whose changes this socket hears of (None: all), read again at every
    # recheck of its session; and the part of the lists' version its page was last told of.
    projects: frozenset[int] | None = frozenset()
    seen: Hashable = None

    async def connect(self) -> None:
        await self.accept()
        user = self.scope["user"]
        problem = await database_sync_to_async(lists_access_problem)(user)
        if problem is not None:
            await self.refuse(problem)
            return
        self.projects = await database_sync_to_async(lists_projects)(user)
        self.user_group = user_group(user.pk)
        await self.channel_layer.group_add(self.user_group, self.channel_name)
        # The page was rendered before this: it refetches on a reconnect, not on this first "live".
        version = (await feeds.join(feeds.ListsFeed, self.channel_layer, "", self)).version
        self.seen = version.seen_by(self.projects) if version is not None else None
        self.start_heartbeat()
        await self.send(text_data=json.dumps({"type": "live", "heartbeat_seconds": self.heartbeat_seconds()}))

    async def refuse(self, problem: tuple[int, str]) -> None:
        code, message = problem
        await self.send(text_data=json.dumps({"type": "error", "error": message}))
        await self.close(code=code)

    async def disconnect(self, code: int) -> None:
        self.stop_heartbeat()
        await feeds.leave(feeds.ListsFeed, self.channel_layer, "", self)
        if self.user_group:
            await self.channel_layer.group_discard(self.user_group, self.channel_name)

    async def session_recheck(self, message: dict[str, Any] | None = None) -> bool:
        """Close the socket unless its session still belongs to a user who may see
        the lists (re-read from the database, not the user the socket opened with)."""
        key = getattr(self.scope.get("session"), "session_key", None)

        def read() -> tuple[tuple[int, str] | None, frozenset[int] | None]:
            user = current_user(key)
            problem = lists_access_problem(user)
            return problem, (lists_projects(user) if problem is None else frozenset())

        problem, self.projects = await self.reread(read, message)
        if problem is None:
            return True
        if problem[0] == NOT_SIGNED_IN:
            problem = (NOT_SIGNED_IN, "signed out (or the account changed); sign in again to watch the lists")
        await self.refuse(problem)
        return False

    async def changed(self, version: feeds.ListsVersion) -> None:
        """The lists' version the feed read, on the feed's task: "changed" only when
        what moved is in a project this viewer sees (another's busy runs stay unsaid)."""
        seen = version.seen_by(self.projects)
        if seen != self.seen:
            self.seen = seen
            await self.send(text_data=json.dumps({"type": "changed"}))
