"""The live trace under stress, with real parts: Daphne, the Redis channel layer,
PostgreSQL, two writer OS processes appending singles and batches to one run as
fast as they can (a worker's loop and a web action, say), a share of their
broadcasts lost on purpose, and 24 WebSocket viewers that connect, drop and
resubscribe with their last seq at random moments. Every viewer must end with
exactly seqs 1..N, each once, in order, on every connection. How soon after the last
write they have it is printed, not asserted (a figure of the machine's load; the
delivery lag is measured in bench/trace_latency.py and bench/trace_clients.py)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from websockets.asyncio.client import connect
from websockets.exceptions import WebSocketException

from runs.models import Run
from tests.fixtures_services import ROOT, service_env
from tests.fixtures_web import AsgiServer
from tests.helpers import World

pytestmark = [pytest.mark.postgres_only, pytest.mark.django_db(transaction=True)]

VIEWERS = 24
EVENTS = 5000  # each writer's: twenty replay pages between them
LOST_SHARE = 0.15  # of each writer's broadcasts to the run
RECHECK_SECONDS = 1
# A viewer still short this long after the last write is stuck, not slow: at any load
# the suite sees, each has everything within a few rechecks.
STUCK_SECONDS = 120


class Viewer:
    """One page's socket: subscribes after the last seq it has, keeps what arrives,
    and (while ``chaos`` lasts) drops the connection at random moments, abruptly or
    cleanly, and comes back. Every connection must bring exactly the seqs after the
    one it asked from, in order, each once."""

    def __init__(self, n: int, url: str, headers: dict[str, str]) -> None:
        self.rng = random.Random(n)
        self.url, self.headers = url, headers
        self.seqs: list[int] = []  # everything kept, in arrival order
        self.problems: list[str] = []
        self.connections = 0
        self.complete_at: float | None = None

    @property
    def last(self) -> int:
        return self.seqs[-1] if self.seqs else 0

    async def watch(self, chaos: asyncio.Event, total: asyncio.Future[int]) -> None:
        await asyncio.sleep(self.rng.random() * 2)  # some join mid-stream
        while not (total.done() and self.last >= total.result()):
            # dropped by the network or the server: come back as a page does
            with contextlib.suppress(WebSocketException, OSError):
                await self.connection(chaos, total)
            if chaos.is_set():
                await asyncio.sleep(self.rng.random() * 0.3)

    async def connection(self, chaos: asyncio.Event, total: asyncio.Future[int]) -> None:
        async with connect(self.url, additional_headers=self.headers, open_timeout=20, close_timeout=0.5, max_size=None) as ws:
            self.connections += 1
            after = self.last
            await ws.send(json.dumps({"type": "subscribe", "after_seq": after}))
            lives = time.monotonic() + self.rng.expovariate(1 / 1.5)
            while True:
                if total.done() and self.last >= total.result():
                    return
                wait = lives - time.monotonic() if chaos.is_set() else 1.0
                try:
                    raw = await asyncio.wait_for(ws.recv(), timeout=max(0.0, wait))
                except TimeoutError:
                    if not chaos.is_set():
                        continue
                    if self.rng.random() < 0.5:
                        ws.transport.abort()  # the network goes, no close handshake
                    else:
                        await ws.close()
                    return
                message = json.loads(raw)
                if message["type"] != "events":
                    continue
                for event in message["events"]:
                    if event["seq"] != self.last + 1:
                        self.problems.append(f"connection {self.connections} (after {after}): seq {event['seq']} after {self.last}")
                        continue
                    self.seqs.append(event["seq"])
                if total.done() and self.last >= total.result() and self.complete_at is None:
                    self.complete_at = time.monotonic()


def writer(run_id: str, seed: int) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.live_writer", run_id, str(EVENTS), str(seed), str(LOST_SHARE)],
        cwd=ROOT,
        env=service_env(),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )


def finish(writers: list[subprocess.Popen[str]]) -> list[dict[str, Any]]:
    outs = []
    for process in writers:
        assert process.stdout is not None
        out = process.stdout.read()  # to its end: the writer has exited
        assert process.wait(30) == 0, out
        outs.append(json.loads(out.splitlines()[-1]))
    return outs


def database_sessions() -> int:
    """How many sessions the database server holds: a server short of connections
    (sessions leaked by earlier tests) fails the viewers' replays."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_stat_activity")
        return int(cursor.fetchone()[0])


def test_it_gives_every_viewer_every_event_once_in_order_with_two_writers_lost_broadcasts_and_reconnects(
    reviewer: User, tmp_path: Path
) -> None:
    run = World().create()
    start = run.last_seq
    client = Client()
    client.force_login(reviewer)
    cookie = "; ".join(f"{name}={morsel.value}" for name, morsel in client.cookies.items())
    server = AsgiServer(tmp_path, HARNESS_TRACE_RECHECK_SECONDS=str(RECHECK_SECONDS))
    server.start()
    writers = [writer(str(run.pk), seed) for seed in (1, 2)]
    try:
        for process in writers:
            assert process.stdout is not None and process.stdout.readline().strip() == "ready"
        headers = {"Cookie": cookie, "Origin": server.url}
        viewers = [Viewer(n, f"ws://127.0.0.1:{server.port}/ws/runs/{run.pk}/", headers) for n in range(VIEWERS)]

        async def scene() -> tuple[list[dict[str, Any]], float]:
            loop = asyncio.get_running_loop()
            chaos, total = asyncio.Event(), loop.create_future()
            chaos.set()
            watching = [asyncio.create_task(viewer.watch(chaos, total)) for viewer in viewers]
            for process in writers:
                assert process.stdin is not None
                process.stdin.write("go\n")
                process.stdin.close()
            outs = await loop.run_in_executor(None, finish, writers)
            last_write = time.monotonic()
            chaos.clear()  # the pages stay open from now on
            total.set_result(start + sum(out["written"] for out in outs))
            for viewer in viewers:
                if viewer.last >= total.result():
                    viewer.complete_at = last_write
            done, _ = await asyncio.wait(watching, timeout=STUCK_SECONDS)
            for task in watching:
                task.cancel()
            for task in done:
                task.result()
            return outs, last_write

        outs, last_write = asyncio.run(scene())
    finally:
        for process in writers:
            if process.poll() is None:
                process.kill()
                process.wait()
        server.stop()
    last_seq = Run.objects.get(pk=run.pk).last_seq
    assert last_seq == start + sum(out["written"] for out in outs)
    assert all(out["dropped"] > 0 for out in outs), outs  # broadcasts were lost on purpose
    assert sum(viewer.connections for viewer in viewers) > 2 * VIEWERS, "the viewers dropped and came back"
    short = {n: last_seq - len(viewer.seqs) for n, viewer in enumerate(viewers) if viewer.seqs != list(range(1, last_seq + 1))}
    problems = [problem for viewer in viewers for problem in viewer.problems]
    assert not short and not problems, (
        f"{len(short)} of {VIEWERS} viewers short {short}; {len(problems)} out of order: {problems[:10]}; "
        f"{database_sessions()} database sessions open; the server's log ends: {server.log()[-4000:]}"
    )
    lags = sorted(round(viewer.complete_at - last_write, 2) for viewer in viewers if viewer.complete_at is not None)
    connections = sum(viewer.connections for viewer in viewers)
    print(f"{last_seq} events, {outs}, {connections} connections, complete after the last write: {lags} s")
