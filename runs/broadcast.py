"""Live fan-out of committed events to WebSocket viewers. The database is the
record: a broadcast that fails is logged and the viewers catch up by replay.

Sending happens on one background thread with its own long-lived event loop, in
commit order, so a slow or restarting Redis never slows a run down, and callers may
be inside an event loop themselves (the ASGI server, a browser test)."""

from __future__ import annotations

import asyncio
import logging
import os
import threading
from typing import Any

from channels.layers import get_channel_layer

log = logging.getLogger(__name__)


def run_group(run_id: str) -> str:
    return f"run.{run_id}"


class _Sender:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        self._pid = -1
        self._pending = 0  # submitted and not yet handed to the channel layer
        self._waiting: list[tuple[str, list[dict[str, Any]]]] = []
        self._signalled = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wake = asyncio.Event()

    def submit(self, run_id: str, events: list[dict[str, Any]]) -> None:
        with self._lock:
            # A forked worker child inherits the object but not the thread.
            if self._pid != os.getpid():
                self._pid = os.getpid()
                self._pending = 0
                self._waiting = []
                self._signalled = False
                self._wake = asyncio.Event()
                self._loop = asyncio.new_event_loop()
                threading.Thread(target=self._loop.run_until_complete, args=(self._pump(),), name="event-broadcast", daemon=True).start()
            self._pending += 1
            self._waiting.append((run_id, events))
            signal, self._signalled = not self._signalled, True
            loop = self._loop
        if signal and loop is not None:
            loop.call_soon_threadsafe(self._wake.set)

    def flush(self, timeout: float = 5.0) -> bool:
        """Wait until everything submitted so far was handed to the channel layer."""
        with self._idle:
            return self._idle.wait_for(lambda: self._pending == 0, timeout)

    async def _pump(self) -> None:
        # One long-lived loop: starting an event loop for every send cost about as
        # much CPU as the send itself, on the thread that shares the worker's GIL.
        while True:
            await self._wake.wait()
            self._wake.clear()
            with self._lock:
                batches, self._waiting = self._waiting, []
                self._signalled = False
            # Whatever queued up while the last send was under way goes out as one
            # message per run: when the sender falls behind, each viewer gets fewer,
            # larger messages instead of a growing backlog (still in commit order).
            merged: dict[str, list[dict[str, Any]]] = {}
            for run_id, events in batches:
                merged.setdefault(run_id, []).extend(events)
            for run_id, events in merged.items():
                try:
                    layer = get_channel_layer()
                    if layer is not None:
                        await layer.group_send(run_group(run_id), {"type": "run.events", "events": events})
                except Exception:  # noqa: BLE001 - the stream is best effort; replay fills gaps
                    log.warning("broadcast of %d events for run %s failed", len(events), run_id, exc_info=True)
            with self._idle:
                self._pending -= len(batches)
                self._idle.notify_all()


_sender = _Sender()


def broadcast_events(run_id: str, events: list[dict[str, Any]]) -> None:
    if events:
        _sender.submit(run_id, events)


def flush_broadcasts(timeout: float = 5.0) -> bool:
    return _sender.flush(timeout)
