"""Doorbells for live viewers: "run R has events up to seq N", rung after the
commit. A doorbell carries nothing a viewer is sent: each web process's feed
(live.feeds) reads the events from the database, so a doorbell that is lost,
late or out of order delays what a viewer sees and never changes it.

Three kinds of message go out: a run's doorbell and "the lists changed" (the global
switch) to the doorbells group, which every web process with a live feed joins once
(the runs list, the inbox and the control page refetch what they show on either; a
run's feed hears its own run's doorbells: live.fanout routes them by run); and a
running check's latest output lines to the run's group, which is ephemeral: never
stored, the final output is the artifact. A commit is one message: a doorbell to the
run's group and a "changed" to the lists' were two sends a commit, and the second
cost about 0.26 M instructions a commit, 8% of a durable step on SQLite
(docs/performance-history.md, 2026-12-07).

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


# Every process with a live feed listens here: the list pages (what a viewer may see
# is decided when the page refetches itself, with the viewer's own permissions) and
# the feeds of the runs it shows.
DOORBELLS_GROUP = "harness.doorbells"
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
            except Exception:  # the stream is best effort; replay fills gaps
                log.warning("broadcast of %s to %s failed", message.get("type"), group, exc_info=True)
        with self._idle:
            self._pending -= len(batches)
            self._idle.notify_all()


def coalesce(batches: list[tuple[str, dict[str, Any]]]) -> list[tuple[str, dict[str, Any]]]:
    """Whatever queued up while the last send was under way, as few messages as
    possible: one per group and kind (and per run for doorbells, per call for
    output), in the place of its first. Nothing is lost by it: a run's doorbell with
    the highest seq says all the earlier ones did (a seq is committed only after
    every seq before it), a call's output is its latest tail, and "the lists
    changed" carries no data."""
    out: list[tuple[str, dict[str, Any]]] = []
    at: dict[tuple[str, str, str], int] = {}  # (group, type, run or call) -> index in out
    for group, message in batches:
        kind = message["type"]
        key = (group, kind, message["output"]["call_id"] if kind == "run.output" else message.get("run_id", ""))
        if key not in at:
            at[key] = len(out)
            out.append((group, message))
            continue
        earlier = out[at[key]][1]
        if message["type"] == "run.doorbell":
            message = {**message, "last_seq": max(earlier["last_seq"], message["last_seq"])}
        out[at[key]] = (group, message)
    return out


_sender = _Sender()


def ring_doorbell(run_id: str, last_seq: int) -> None:
    """Events of the run up to ``last_seq`` are committed (call it after the commit):
    for the run's feeds and the list pages, which every event of a run may change."""
    _sender.submit(DOORBELLS_GROUP, {"type": "run.doorbell", "run_id": run_id, "last_seq": last_seq})


def broadcast_output(run_id: str, output: dict[str, Any]) -> None:
    """A running call's latest output (``runs.persistence.live_output``): shown, never stored."""
    _sender.submit(run_group(run_id), {"type": "run.output", "output": output})


def broadcast_lists_changed(reason: str) -> None:
    """Something the lists show changed without a run event (the global switch)."""
    _sender.submit(DOORBELLS_GROUP, {"type": "lists.changed", "reason": reason})


def flush_broadcasts(timeout: float = 5.0) -> bool:
    return _sender.flush(timeout)
