"""What a process's sockets share, one per key: the group subscriptions (live.fanout)
and the feeds (live.feeds). The first to join makes it, each waits until it is
ready, and the last to leave closes it; a member's turn that fails leaves the
other members' turns alone."""

from __future__ import annotations

import asyncio
import logging
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Hashable, Iterable, Iterator
from typing import Any, Generic, TypeVar

log = logging.getLogger(__name__)

M = TypeVar("M")


class Shared(ABC, Generic[M]):
    """Shared by its ``members``, and ready once ``ready`` is done."""

    group: str  # the channel layer's group it serves
    ready: asyncio.Future[None]

    def __init__(self) -> None:
        self.members: dict[M, None] = {}  # a set that keeps joining order

    async def each(self, turn: Callable[[M], Awaitable[None]], members: Iterable[M] | None = None) -> None:
        """``turn`` for each member in joining order (or of ``members``, in their order)."""
        for member in list(self.members if members is None else members):
            if member not in self.members:  # left during an earlier member's turn
                continue
            try:
                await turn(member)
            except Exception:  # one socket's failure must not stop the others' stream
                log.exception("a member of %s failed", self.group)

    @abstractmethod
    async def close(self) -> None:
        """Stop, once the last member left."""


K = TypeVar("K", bound=Hashable)
S = TypeVar("S", bound=Shared[Any])


class Registry(Generic[K, S]):
    """The shared things of a process, by key and event loop (Daphne runs one loop;
    tests start one per call)."""

    def __init__(self) -> None:
        self._shared: dict[tuple[K, asyncio.AbstractEventLoop], S] = {}

    def __iter__(self) -> Iterator[K]:
        return (key for key, _ in self._shared)

    def __len__(self) -> int:
        return len(self._shared)

    def get(self, key: K) -> S | None:
        """The shared thing of ``key`` on this event loop, if there is one."""
        return self._shared.get((key, asyncio.get_running_loop()))

    async def join(self, key: K, make: Callable[[], S], member: object) -> S:
        """The shared thing of ``key`` (``make`` makes it if there is none), with
        ``member`` among its members, once it is ready."""
        at = (key, asyncio.get_running_loop())
        shared = self._shared.get(at)
        if shared is None:
            shared = self._shared[at] = make()
        shared.members[member] = None
        try:
            # Shielded: one joiner cancelled (its socket closed) must not undo the others' join.
            await asyncio.shield(shared.ready)
        except BaseException:
            # It failed to get ready (Redis or the database down) or this socket closed
            # meanwhile: the last one out removes it, so the next joiner starts afresh.
            await self.leave(key, member)
            raise
        return shared

    async def leave(self, key: K, member: object) -> bool:
        """``member`` leaves; the last to leave closes the shared thing. Whether it did."""
        at = (key, asyncio.get_running_loop())
        shared = self._shared.get(at)
        if shared is None or member not in shared.members:
            return False
        del shared.members[member]
        if shared.members:
            return False
        del self._shared[at]
        await shared.close()
        return True
