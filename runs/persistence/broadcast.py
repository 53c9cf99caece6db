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

Sending happens on one background thread, in commit order, so a slow or restarting
Redis never slows a run down, and callers may be inside an event loop themselves (the
ASGI server, a browser test). The thread publishes with redis-py's blocking client
on one connection of its own, in the channel layer's format and on its group
channels (``_group_channel``), where live.fanout's subscriptions receive them
through the layer. The layer's own send, redis.asyncio on an event loop of this
thread's, cost 0.35 M instructions a commit, this 0.09 M: the rest was the event
loop's wake-ups and redis.asyncio's machinery around one PUBLISH
(docs/performance-history.md, 2026-12-07)."""

from __future__ import annotations

import logging
import os
import threading
import time
from typing import Any

import redis
from channels.layers import get_channel_layer
from django.conf import settings

log = logging.getLogger(__name__)


# Every process with a live feed listens here: the list pages (what a viewer may see
# is decided when the page refetches itself, with the viewer's own permissions) and
# the feeds of the runs it shows.
DOORBELLS_GROUP = "harness.doorbells"
# A process sends at most one round of broadcasts this often: what commits meanwhile
# waits for the next round (a live viewer sees it up to this much later).
ROUND_SECONDS = 0.02
# Redis unreachable: a round gives up after this long (its doorbells are lost; the
# feeds' rechecks find what they announced) rather than hold back the next ones.
REDIS_TIMEOUT_SECONDS = 2.0


def run_group(run_id: str) -> str:
    return f"run.{run_id}"


def _group_channel(prefix: str, group: str) -> str:
    # The Redis channel channels_redis's pub/sub layer gives a group
    # (RedisPubSubLoopLayer._get_group_channel_name), which its subscriptions listen on;
    # tests/test_live_delivery.py checks the two agree.
    return f"{prefix}__group__{group}"


class _Sender:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        self._wake = threading.Condition(self._lock)
        self._pid = -1
        self._pending = 0  # submitted and not yet handed to Redis
        self._waiting: list[tuple[str, dict[str, Any]]] = []
        self._signalled = False

    def submit(self, group: str, message: dict[str, Any]) -> None:
        with self._lock:
            # A forked worker child inherits the object but not the thread, nor the
            # thread's place among the conditions' waiters.
            if self._pid != os.getpid():
                self._pid = os.getpid()
                self._pending = 0
                self._waiting = []
                self._signalled = False
                self._idle = threading.Condition(self._lock)
                self._wake = threading.Condition(self._lock)
                threading.Thread(target=self._pump, name="event-broadcast", daemon=True).start()
            self._pending += 1
            self._waiting.append((group, message))
            if not self._signalled:
                self._signalled = True
                self._wake.notify()

    def flush(self, timeout: float = 5.0) -> bool:
        """Wait until everything submitted so far was handed to Redis."""
        with self._idle:
            return self._idle.wait_for(lambda: self._pending == 0, timeout)

    def _pump(self) -> None:
        publisher = _Publisher()
        while True:
            # The first commit after a quiet spell goes out at once. Under a stream of
            # commits one round per ROUND_SECONDS carries all that queued meanwhile:
            # fewer, larger messages, for Redis, for this thread's share of the GIL and
            # for every viewer's socket. While rounds go on this thread wakes on its own
            # timer, and committers do not signal it: a signal is one more wake-up
            # here, a handover of the GIL.
            with self._lock:
                while not self._waiting:
                    self._signalled = False
                    self._wake.wait()
                batches, self._waiting = self._waiting, []
            try:
                publisher.publish(coalesce(batches))
            except Exception:  # the stream is best effort; replay fills gaps
                log.warning("broadcast of %d messages failed", len(batches), exc_info=True)
            with self._idle:
                self._pending -= len(batches)
                self._idle.notify_all()
            time.sleep(ROUND_SECONDS)


class _Publisher:
    """A round's messages, one PUBLISH each, written at once on a connection of its own."""

    def __init__(self) -> None:
        config = settings.CHANNEL_LAYERS["default"]["CONFIG"]
        [url] = config["hosts"]
        self.prefix: str = config["prefix"]
        self.layer = get_channel_layer()
        pool = redis.ConnectionPool.from_url(url, socket_timeout=REDIS_TIMEOUT_SECONDS, socket_connect_timeout=REDIS_TIMEOUT_SECONDS)
        # Connects when first used (Redis may be down now); its methods carry no types.
        self.connection: Any = pool.make_connection()

    def publish(self, messages: list[tuple[str, dict[str, Any]]]) -> None:
        commands = [("PUBLISH", _group_channel(self.prefix, group), self.layer.serialize(message)) for group, message in messages]
        try:
            self._send(commands)
        except redis.ConnectionError:
            # The connection may have died with a Redis restart since the last round,
            # which shows only when it is used: once more, on a new one.
            self._send(commands)

    def _send(self, commands: list[tuple[str, str, bytes]]) -> None:
        try:
            self.connection.send_packed_command(self.connection.pack_commands(commands))
            for _ in commands:
                self.connection.read_response()
        except BaseException:
            self.connection.disconnect()  # no reply of this round left for the next to read
            raise


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
