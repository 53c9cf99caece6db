"""Live fan-out of committed events to WebSocket viewers. The database is the
record: a broadcast that fails is logged and the viewers catch up by replay.

Three kinds of message go out: a run's events to the run's group; a one-line
"this run changed" to the lists group (the runs list, the inbox and the control page
refetch what they show); and a running check's latest output lines to the run's
group, which is ephemeral: never stored, the final output is the artifact.

Sending happens on one background thread with its own event loop, in commit order,
so a slow or restarting Redis never slows a run down, and callers may be inside an
event loop themselves (the ASGI server, a browser test)."""

from __future__ import annotations

import asyncio
import logging
import os
import queue
import threading
from typing import Any

from channels.layers import get_channel_layer

log = logging.getLogger(__name__)


# Every page that lists runs or requests listens here; what it may see is decided
# when it refetches the page, with the viewer's own permissions.
LISTS_GROUP = "harness.lists"


def run_group(run_id: str) -> str:
    return f"run.{run_id}"


class _Sender:
    def __init__(self) -> None:
        self._queue: queue.SimpleQueue[tuple[str, dict[str, Any]]] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._pid = -1
        self._pending = 0
        self._idle = threading.Condition(self._lock)

    def submit(self, group: str, message: dict[str, Any]) -> None:
        with self._lock:
            # A forked worker child inherits the object but not the thread.
            if self._pid != os.getpid():
                self._pid = os.getpid()
                self._pending = 0
                self._queue = queue.SimpleQueue()
                threading.Thread(target=self._run, name="event-broadcast", daemon=True).start()
            self._pending += 1
        self._queue.put((group, message))

    def flush(self, timeout: float = 5.0) -> bool:
        """Wait until everything submitted so far was handed to the channel layer."""
        with self._idle:
            return self._idle.wait_for(lambda: self._pending == 0, timeout)

    def _run(self) -> None:
        loop = asyncio.new_event_loop()
        inbox = self._queue
        while True:
            group, message = inbox.get()
            try:
                layer = get_channel_layer()
                if layer is not None:
                    loop.run_until_complete(layer.group_send(group, message))
            except Exception:  # noqa: BLE001 - the stream is best effort; replay fills gaps
                log.warning("broadcast of %s to %s failed", message.get("type"), group, exc_info=True)
            finally:
                with self._idle:
                    self._pending -= 1
                    self._idle.notify_all()


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
