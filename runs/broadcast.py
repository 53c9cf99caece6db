"""Live fan-out of committed events to WebSocket viewers. The database is the
record: a broadcast that fails is logged and the viewers catch up by replay.

Three kinds of message go out: a run's events to the run's group; a one-line
"this run changed" to the lists group (the runs list, the inbox and the control page
refetch what they show); and a running check's latest output lines to the run's
group, which is ephemeral: never stored, the final output is the artifact.

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


# Every page that lists runs or requests listens here; what it may see is decided
# when it refetches the page, with the viewer's own permissions.
LISTS_GROUP = "harness.lists"
# A process sends at most one round of broadcasts this often: what commits meanwhile
# waits for the next round (a live viewer sees it up to this much later).
ROUND_SECONDS = 0.02


def run_group(run_id: str) -> str:
    return f"run.{run_id}"


class _Sender:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        self._pid = -1
        self._pending = 0  # submitted and not yet handed to the channel layer
        self._waiting: list[tuple[str, dict[str, Any]]] = []
        self._signalled = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wake = asyncio.Event()

    def submit(self, group: str, message: dict[str, Any]) -> None:
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
            self._waiting.append((group, message))
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
            # The first commit after a quiet spell goes out at once. Under a stream of
            # commits one round per ROUND_SECONDS carries all that queued meanwhile:
            # fewer, larger messages, for Redis, for this thread's share of the GIL and
            # for every viewer's socket. While rounds go on this thread wakes on its own
            # timer, and committers do not signal it: a signal is a system call on the
            # committing thread and one more wake-up here, each a handover of the GIL.
            while True:
                with self._lock:
                    batches, self._waiting = self._waiting, []
                    if not batches:
                        self._signalled = False
                        break
                await self._send(batches)
                await asyncio.sleep(ROUND_SECONDS)

    async def _send(self, batches: list[tuple[str, dict[str, Any]]]) -> None:
        for group, message in coalesce(batches):
            try:
                layer = get_channel_layer()
                if layer is not None:
                    await layer.group_send(group, message)
            except Exception:  # noqa: BLE001 - the stream is best effort; replay fills gaps
                log.warning("broadcast of %s to %s failed", message.get("type"), group, exc_info=True)
        with self._idle:
            self._pending -= len(batches)
            self._idle.notify_all()


def coalesce(batches: list[tuple[str, dict[str, Any]]]) -> list[tuple[str, dict[str, Any]]]:
    """Whatever queued up while the last send was under way, as few messages as
    possible: when the sender falls behind, each viewer gets fewer, larger messages
    instead of a growing backlog. Only a group's consecutive messages merge, so each
    group still gets everything in commit order."""
    out: list[tuple[str, dict[str, Any]]] = []
    last: dict[str, int] = {}  # group -> index in out of its latest message
    for group, message in batches:
        at = last.get(group)
        merged = _merged(out[at][1], message) if at is not None else None
        if at is not None and merged is not None:
            out[at] = (group, merged)
            continue
        last[group] = len(out)
        out.append((group, message))
    return out


def _merged(earlier: dict[str, Any], later: dict[str, Any]) -> dict[str, Any] | None:
    """One message standing for two consecutive ones to the same group, or None."""
    if earlier["type"] != later["type"]:
        return None
    if later["type"] == "run.events":
        return {**earlier, "events": earlier["events"] + later["events"]}
    # A running call's output is its latest tail, and "changed" carries no data to
    # lose: the later message says all the earlier one did.
    if later["type"] == "run.output" and earlier["output"]["call_id"] == later["output"]["call_id"]:
        return later
    if later["type"] == "lists.changed":
        return later
    return None


_sender = _Sender()


def broadcast_events(run_id: str, events: list[dict[str, Any]]) -> None:
    if events:
        _sender.submit(run_group(run_id), {"type": "run.events", "events": events})
        _sender.submit(LISTS_GROUP, {"type": "lists.changed", "run_id": run_id})


def broadcast_output(run_id: str, output: dict[str, Any]) -> None:
    """A running call's latest output (``runs.live_output``): shown, never stored."""
    _sender.submit(run_group(run_id), {"type": "run.output", "output": output})


def broadcast_lists_changed(reason: str) -> None:
    """Something the lists show changed without a run event (the global switch)."""
    _sender.submit(LISTS_GROUP, {"type": "lists.changed", "run_id": "", "reason": reason})


def flush_broadcasts(timeout: float = 5.0) -> bool:
    return _sender.flush(timeout)
