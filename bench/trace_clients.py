"""The clients of bench/trace_latency.py, each run in a process of its own: the writer
that commits events at a steady rate or as fast as it can, the WebSocket viewers that
record when each event arrives, and the opener of a long run's page; with the runs
and the session they use."""

from __future__ import annotations

import asyncio
import json
import os
import random
import re
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def new_run(user: Any) -> str:
    from runs.services import check_new_run, do_create_run

    contract = json.loads((ROOT / "examples" / "demo" / "contract.json").read_text())
    new = check_new_run(contract, {"kind": "scripted", "script": []})
    return str(do_create_run(new, user, lambda run: "0" * 40).pk)


def note(run_id: str, n: int) -> Any:
    from core import events as ev

    return ev.ModelNote(run_id=run_id, seq=0, ts=time.time(), kind="bench", detail={"n": n, "text": "x" * 200})


def write_events(run_id: str, rate: float, count: int, batch: int, out: Path) -> None:
    """A writer process: ``count`` events, at ``rate`` events/s or (rate 0) as fast as
    it can; with ``batch`` above 1 every other transaction holds 2 to ``batch``
    events, the others one. Records each event's commit time (an on_commit hook
    registered before the broadcast's)."""
    import django

    django.setup()
    from django.db import transaction

    from core.fences import RowLock
    from runs.persistence.broadcast import flush_broadcasts
    from runs.persistence.eventlog import append_events

    committed: dict[int, float] = {}
    # Set up, then start when told: the writers of a pair write at the same time.
    print("ready", flush=True)
    sys.stdin.readline()
    start = time.perf_counter()
    n = 0
    while n < count:
        if rate:
            delay = start + n / rate - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
        size = min(count - n, random.randint(2, batch) if batch > 1 and len(committed) % 2 else 1)
        stamp: dict[str, float] = {}

        def committed_at(stamp: dict[str, float] = stamp) -> None:
            stamp.setdefault("t", time.time())

        with transaction.atomic():
            transaction.on_commit(committed_at)
            rows = append_events(run_id, [note(run_id, n + i) for i in range(size)], fence=RowLock("the bench's writer"))
        for row in rows:
            committed[row.seq] = stamp["t"]
        n += size
    flush_broadcasts()  # they are sent from a background thread that dies with this process
    out.write_text(json.dumps(committed))


async def watch(
    url: str,
    cookie: str,
    origin: str,
    after: int,
    expected: int,
    arrivals: dict[int, float],
    ready: asyncio.Event,
    stop: asyncio.Future[None] | None = None,
    repeats: list[int] | None = None,
) -> None:
    """One viewer until it has ``expected`` events (or ``stop`` is done); a seq it
    gets twice goes into ``repeats``."""
    from autobahn.asyncio.websocket import WebSocketClientFactory, WebSocketClientProtocol

    done = asyncio.get_running_loop().create_future()
    if stop is not None:

        def stopped(_: asyncio.Future[None]) -> None:
            if not done.done():
                done.set_result(None)

        stop.add_done_callback(stopped)

    class Viewer(WebSocketClientProtocol):
        def onOpen(self) -> None:
            self.sendMessage(json.dumps({"type": "subscribe", "after_seq": after}).encode())  # type: ignore[no-untyped-call]  # autobahn is unannotated

        def onMessage(self, payload: bytes, is_binary: bool) -> None:
            now = time.time()
            message = json.loads(payload)
            if message["type"] == "live":
                ready.set()
            elif message["type"] == "events":
                for event in message["events"]:
                    if event["seq"] in arrivals and repeats is not None:
                        repeats.append(event["seq"])
                    arrivals.setdefault(event["seq"], now)
                if len(arrivals) >= expected and not done.done():
                    done.set_result(None)

    factory = WebSocketClientFactory(url, origin=origin, headers={"Cookie": cookie})  # type: ignore[no-untyped-call]  # autobahn is unannotated
    factory.protocol = Viewer
    host, port = url.split("//", 1)[1].split("/", 1)[0].split(":")
    transport, _ = await asyncio.get_running_loop().create_connection(factory, host, int(port))
    try:
        await asyncio.wait_for(done, timeout=300)
    finally:
        transport.close()


def session_cookie(user: Any) -> str:
    from django.test import Client

    client = Client()
    client.force_login(user)
    return "; ".join(f"{name}={morsel.value}" for name, morsel in client.cookies.items())


def fill(run_id: str, count: int) -> None:
    from core.fences import RowLock
    from runs.persistence.eventlog import append_events

    for start in range(0, count, 500):
        append_events(run_id, [note(run_id, n) for n in range(start, min(count, start + 500))], fence=RowLock("the bench's writer"))


def open_page(base: str, run_id: str, cookie: str) -> tuple[float, float, int]:
    """Seconds to the page's HTML, then to the socket's "live" after what the page shows."""
    started = time.perf_counter()
    request = urllib.request.Request(f"{base}/runs/{run_id}/", headers={"Cookie": cookie})
    with urllib.request.urlopen(request, timeout=60) as response:
        html = response.read()
    page = time.perf_counter() - started
    match = re.search(rb'data-last-seq="(\d+)"', html)
    assert match, "the page has no timeline"
    ready = asyncio.Event()

    async def to_live() -> None:
        url = base.replace("http", "ws", 1) + f"/ws/runs/{run_id}/"
        task = asyncio.create_task(watch(url, cookie, base, int(match.group(1)), 10**9, {}, ready))
        await asyncio.wait_for(ready.wait(), timeout=60)
        task.cancel()

    asyncio.run(to_live())
    return page, time.perf_counter() - started, len(html)


def viewers_process(url: str, cookie: str, origin: str, count: int, expected: int, out: Path) -> None:
    """The viewers, in a process without Django (autobahn's asyncio flavour cannot
    share a process with Daphne's Twisted one): "ready" once all are live, then
    the arrival times of every event at every viewer, once all have every event or
    a line on stdin says to stop (what is missing then is never coming)."""
    arrivals: list[dict[int, float]] = [{} for _ in range(count)]
    repeats: list[int] = []

    async def run() -> None:
        loop = asyncio.get_running_loop()
        stop = loop.run_in_executor(None, sys.stdin.readline)
        readies = [asyncio.Event() for _ in range(count)]
        tasks = [asyncio.create_task(watch(url, cookie, origin, 0, expected, arrivals[i], readies[i], stop, repeats)) for i in range(count)]
        all_ready = asyncio.ensure_future(asyncio.gather(*(ready.wait() for ready in readies)))
        waited: list[asyncio.Future[Any]] = [all_ready, *tasks]
        await asyncio.wait(waited, return_when=asyncio.FIRST_COMPLETED)
        for task in tasks:
            if task.done():
                task.result()  # a viewer that failed to connect fails the bench
        print("ready", flush=True)
        await asyncio.gather(*tasks)
        out.write_text(json.dumps({"arrivals": arrivals, "repeats": len(repeats)}))
        print("done", flush=True)
        os._exit(0)  # the stdin reader's thread may still wait for a line

    asyncio.run(run())
