"""One subscription per process per live group, fanned out inside the process.

Through the channel layer every socket in a group gets its own copy of each group
message: a queue put, a task wake-up, a decode and a dispatch per viewer per
message, which at 200 events/s to 20 viewers was most of the web process's CPU.
For the live groups (a run's doorbells and output, the lists' doorbells) the
process instead joins the group once, on a channel of its own, and one task hands
each message, decoded once, to every local listener in turn: the group's feed
(live.feeds), which reads from the database what its viewers are sent. Delivery is
the layer's own: in order per group, at most once with pub/sub (a lost doorbell
only delays: the feed's next read or recheck finds what it announced), and Redis
reconnects are the layer's business.

In the doorbells group every run's doorbell reaches every process with a feed: a
run's feed joins it for its own run only, and the hub hands a message naming a run
(``run_id``) to the listeners of that run and to those that hear everything (the
lists' feed), so a doorbell costs one turn per process whatever number of runs it
watches.

A listener's ``hear`` runs on the hub's task, between other listeners' turns: it
must not wait on anything slow (a database read, a lock another handler holds), or
every viewer of the group waits with it. It may ``send`` on its socket, which
Daphne writes without waiting."""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Protocol

from live.sharing import Registry, Shared

log = logging.getLogger(__name__)

# After a failed receive (Redis gone), wait this long before trying again.
RETRY_SECONDS = 1.0


class Listener(Protocol):
    async def hear(self, message: dict[str, Any]) -> None: ...


class _Hub(Shared[Listener]):
    def __init__(self, layer: Any, group: str) -> None:
        super().__init__()
        self.layer = layer
        self.group = group
        self.channel = ""
        self.ready = asyncio.ensure_future(self._join())
        self.pump: asyncio.Task[None] | None = None
        # Listeners by the run whose messages they hear; None: every message.
        self.hearing: dict[str | None, dict[Listener, None]] = {}

    async def _join(self) -> None:
        self.channel = await self.layer.new_channel()
        await self.layer.group_add(self.group, self.channel)
        self.pump = asyncio.create_task(self._pump())

    async def _pump(self) -> None:
        while True:
            try:
                message = await self.layer.receive(self.channel)
            except Exception:  # the listeners fill what is lost meanwhile
                log.warning("receiving %s failed; retrying", self.group, exc_info=True)
                await asyncio.sleep(RETRY_SECONDS)
                continue
            await self._tell(message)

    async def _tell(self, message: dict[str, Any]) -> None:
        run = message.get("run_id")
        listeners = [*self.hearing.get(None, ()), *(self.hearing.get(run, ()) if run is not None else ())]
        await self.each(lambda listener: listener.hear(message), listeners)

    def listen(self, listener: Listener, run: str | None) -> None:
        self.hearing.setdefault(run, {})[listener] = None

    def unlisten(self, listener: Listener) -> None:
        for run, listeners in list(self.hearing.items()):
            listeners.pop(listener, None)
            if not listeners:
                del self.hearing[run]

    async def close(self) -> None:
        self.ready.cancel()
        if self.pump is not None:
            self.pump.cancel()  # cancelling the receive also drops the pub/sub subscription
        if self.channel:
            await self.layer.group_discard(self.group, self.channel)


# (layer, group) -> hub.
_hubs: Registry[tuple[int, str], _Hub] = Registry()


async def join(layer: Any, group: str, listener: Listener, run: str | None = None) -> None:
    """Have ``listener.hear`` called with the group's messages (with ``run``: only
    those naming that run). Returns once the process is in the group: whatever is
    sent to it from now on reaches the listener (as far as the layer delivers)."""
    hub = await _hubs.join((id(layer), group), lambda: _Hub(layer, group), listener)
    hub.listen(listener, run)


async def leave(layer: Any, group: str, listener: Listener) -> None:
    hub = _hubs.get((id(layer), group))
    if hub is not None:
        hub.unlisten(listener)
    await _hubs.leave((id(layer), group), listener)
