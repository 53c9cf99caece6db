"""Live-trace latency and the cost of opening a long run, against a real Daphne
process, the Redis channel layer and WebSocket clients:

- from an event's commit to its arrival in each connected viewer, with events
  committed at a steady rate (default 200 events/s) and 20 viewers on the run
  (median, p99, max), and the web process's CPU time per 1000 deliveries;
- the same with two writer processes on one run (a worker's loop and a web action),
  each committing singles and batches as fast as it can: the rate they reach
  together, the latency, and any event a viewer never got (it must be none);
- opening the page of a run with 10,000 events: the HTML, and the HTML plus the
  socket's replay up to "live" (what a person waits for).

    python bench/trace_latency.py [--rate 200] [--seconds 10] [--viewers 20] [--repeats 5]
                                  [--pair-events 2000] [--pair-repeats 3] [--postgres]
                                  [--events 10000] [--no-worker] [--json] [--write-doc]
    python bench/trace_latency.py --recheck-cost ROUNDS [--postgres]
    python bench/trace_latency.py --callgrind [--events 10000] [--postgres]

The live measurement is repeated ``--repeats`` times in a row (the target is p99 under
100 ms in every one), while a Celery worker runs sandbox checks for other runs, as a
deployment's web process sees it; ``--no-worker`` leaves the worker out. Each repeat
records the machine's load beside its figures.

``--recheck-cost`` measures only what a socket's session recheck at each heartbeat
costs the web process (every viewer re-reads its session every beat): CPU,
statements and connections opened per recheck, the two ways the web process runs one.

``--callgrind`` counts, with valgrind's callgrind (bench/instructions.py), the
instructions of the web process's code that the CPU per delivery and the opening
figure rest on, which the load does not change: a feed's read of a page of 500
events (``live.feeds.read_page``: read, describe, mark hidden characters, encode;
once per event for all of a process's viewers), and the run page's HTML of a run
with ``--events`` events, as the web process (DEBUG on) renders it.

Uses its own SQLite database (``--postgres``: its own PostgreSQL database on
127.0.0.1, created and dropped by the bench), variable directory, channel prefix,
Celery queue and container scope. ``--write-doc`` puts the table into docs/performance-history.md under "Live trace"."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any, TypedDict

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from celery_worker import start_worker  # noqa: E402
from machine import load, machine, now  # noqa: E402

from bench.instructions import measured, parts  # noqa: E402
from bench.trace_clients import fill, new_run, open_page, session_cookie, viewers_process, write_events  # noqa: E402
from bench.trace_figures import cpu_seconds, percentile, scheduler_ns, summary, table  # noqa: E402

# The writer process is this script again; it must find the same directory and prefix.
# (Made only once: the children inherit it, and each used to leave an empty one behind.)
if "BENCH_TRACE_VAR" not in os.environ:
    os.environ["BENCH_TRACE_VAR"] = tempfile.mkdtemp(prefix="bench-trace-")
VAR = Path(os.environ["BENCH_TRACE_VAR"])
PREFIX = os.environ.setdefault("BENCH_TRACE_PREFIX", f"bench-{uuid.uuid4().hex[:8]}")
ENV = {
    **os.environ,
    "DEBUG": "1",
    "DJANGO_SETTINGS_MODULE": "harness_site.settings",
    "HARNESS_VAR_DIR": str(VAR),
    "HARNESS_CHANNEL_PREFIX": PREFIX,
    "HARNESS_QUEUE": PREFIX,
    "HARNESS_SANDBOX_SCOPE": PREFIX,
    "LOG_LEVEL": "ERROR",
}
os.environ.update(ENV)
DOC = ROOT / "docs" / "performance-history.md"
# A viewer that lacks an event this long after the last write is taken to have lost it.
GRACE_SECONDS = 15
POSTGRES = "postgres://postgres@127.0.0.1:5432"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def wait_ready(base: str, log: Path) -> None:
    for _ in range(300):
        try:
            urllib.request.urlopen(f"{base}/accounts/login/", timeout=1).read()
            return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"daphne did not start: {log.read_text()[-2000:]}")


def child(*args: str, stdin: int | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, __file__, *args], env=ENV, stdin=stdin, stdout=subprocess.PIPE, text=True)


def busy_worker(user: Any, stop: threading.Event, checks: list[int]) -> None:
    """Keep a Celery worker running sandbox checks until ``stop``: one run at a time of
    repeated ``tests`` checks on the demo workspace; ``checks`` counts those finished."""
    from runs.models import Evidence, Run
    from runs.runtime import create_run

    contract = json.loads((ROOT / "examples" / "demo" / "contract.json").read_text())
    script = {"kind": "scripted", "script": [{"tool": "run_check", "args": {"check_id": "tests"}}] * 19}
    run = None
    while not stop.is_set():
        if run is None or Run.objects.get(pk=run.pk).status not in ("running", "waiting_approval"):
            run = create_run(contract, script, user)
        stop.wait(0.5)
    checks.append(Evidence.objects.count())


class Load(TypedDict):
    """What ``stream_once`` writes: how many writers, at what rate, how many events, in batches of up to how many."""

    writers: int
    rate: float
    count: int
    batch: int


def stream_once(
    port: int, server: int, user: Any, cookie: str, viewers: int, *, writers: int, rate: float, count: int, batch: int
) -> dict[str, Any]:
    """One live measurement: a fresh run, ``viewers`` sockets on it, ``writers``
    writer processes of ``count`` events each. Also the web process's CPU time per
    1000 deliveries, a figure the machine's load does not change much."""
    base = f"http://127.0.0.1:{port}"
    live_run = new_run(user)
    total = writers * count
    arrivals_file = VAR / "arrivals.json"
    load_before = load()
    viewers_proc = child(
        "--viewers-process",
        f"ws://127.0.0.1:{port}/ws/runs/{live_run}/",
        cookie,
        base,
        str(viewers),
        str(total),
        str(arrivals_file),
        stdin=subprocess.PIPE,
    )
    assert viewers_proc.stdout is not None and viewers_proc.stdout.readline().strip() == "ready", "the viewers did not connect"
    cpu_before = cpu_seconds(server)
    sched_before, wall_before = scheduler_ns(server), time.monotonic()
    committed_files = [VAR / f"committed-{n}.json" for n in range(writers)]
    writing = [child("--writer", live_run, str(rate), str(count), str(batch), str(out), stdin=subprocess.PIPE) for out in committed_files]
    for writer in writing:
        assert writer.stdout is not None and writer.stdout.readline().strip() == "ready", "a writer did not start"
    for writer in writing:
        assert writer.stdin is not None
        writer.stdin.write("go\n")
        writer.stdin.close()
    if any(writer.wait() for writer in writing):
        raise RuntimeError("a writer failed")
    # Whatever a viewer lacks this long after the last write is lost for good.
    try:
        viewers_proc.wait(GRACE_SECONDS)
    except subprocess.TimeoutExpired:
        assert viewers_proc.stdin is not None
        viewers_proc.stdin.write("stop\n")
        viewers_proc.stdin.close()
    if viewers_proc.wait(60):
        raise RuntimeError("the viewers failed")
    committed = {int(seq): t for out in committed_files for seq, t in json.loads(out.read_text()).items()}
    seen = json.loads(arrivals_file.read_text())
    arrivals = [{int(seq): t for seq, t in got.items()} for got in seen["arrivals"]]
    latencies = [(got[seq] - t) * 1000 for got in arrivals for seq, t in committed.items() if seq in got]
    web_cpu = cpu_seconds(server) - cpu_before
    sched_after, wall = scheduler_ns(server), time.monotonic() - wall_before
    return {
        "writers": writers,
        "events_per_s": round(len(committed) / max(1e-3, max(committed.values()) - min(committed.values())), 1),
        "web_cpu_ms_per_1000_deliveries": round(web_cpu * 1e6 / max(1, len(latencies)), 1),
        # Per second of the stream: how long the web process ran, and how long it was
        # ready to run but waited for a CPU (starvation by the machine, not its own cost).
        "web_on_cpu_ms_per_s": round((sched_after[0] - sched_before[0]) / 1e6 / wall, 1),
        "web_runqueue_wait_ms_per_s": round((sched_after[1] - sched_before[1]) / 1e6 / wall, 1),
        "median": round(statistics.median(latencies), 2),
        "p99": round(percentile(latencies, 0.99), 2),
        "max": round(max(latencies), 2),
        "deliveries": len(latencies),
        "missing": viewers * len(committed) - len(latencies),
        "viewers_missing_some": sum(len(got) < len(committed) for got in arrivals),
        "repeated": seen["repeats"],
        "load": f"{load_before} -> {load()}",
    }


def bench_operator() -> Any:
    """Django set up on the bench's own database, migrated, and its operator."""
    import django

    django.setup()
    from django.contrib.auth.models import Group, User
    from django.core.management import call_command

    from runs.roles import ensure_roles

    call_command("migrate", verbosity=0)
    ensure_roles()
    user = User.objects.create_user("bench-operator")
    user.groups.add(Group.objects.get(name="operator"))
    return user


def measure(
    rate: float, seconds: float, viewers: int, repeats: int, pair_events: int, pair_repeats: int, events: int, with_worker: bool
) -> dict[str, Any]:
    user = bench_operator()
    from django.conf import settings
    from django.db import connection

    from runs.models import Evidence

    cookie = session_cookie(user)
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    started_at, load_at_start = now(), load()
    server = subprocess.Popen(
        [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port), "harness_site.asgi:application"],
        cwd=ROOT,
        env=ENV,
        stdout=open(VAR / "daphne.log", "wb"),  # noqa: SIM115 - closed with the process
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    worker = start_worker(PREFIX, 1, ENV, VAR / "worker.log") if with_worker else None
    stop = threading.Event()
    checks: list[int] = []
    feeder = threading.Thread(target=busy_worker, args=(user, stop, checks), daemon=True) if worker else None
    try:
        wait_ready(base, VAR / "daphne.log")
        if feeder:
            feeder.start()
            deadline = time.monotonic() + 120
            while not Evidence.objects.exists():  # the worker is running checks before the clock starts
                if time.monotonic() > deadline:
                    raise RuntimeError(f"the worker ran no check in 120 s: {(VAR / 'worker.log').read_text()[-2000:]}")
                time.sleep(0.2)
        checks_before = Evidence.objects.count()
        single: Load = {"writers": 1, "rate": rate, "count": int(rate * seconds), "batch": 1}
        streams = [stream_once(port, server.pid, user, cookie, viewers, **single) for _ in range(repeats)]
        pair: Load = {"writers": 2, "rate": 0, "count": pair_events, "batch": 5}
        pairs = [stream_once(port, server.pid, user, cookie, viewers, **pair) for _ in range(pair_repeats)]
        if feeder:
            stop.set()
            feeder.join(30)
        checks_during = (checks[0] if checks else Evidence.objects.count()) - checks_before

        long_run = new_run(user)
        fill(long_run, events)
        opener = child("--open", base, long_run, cookie)
        out, _ = opener.communicate(timeout=600)
        opens = json.loads(out)
    finally:
        stop.set()
        for process in (server, worker):
            if process is not None:
                os.killpg(process.pid, signal.SIGTERM)
                process.wait(30)
        if worker is not None:
            from sandbox.container.orphans import sweep_orphans

            sweep_orphans([], scope=PREFIX)  # the container of a run the worker was still driving
    return {
        "date": started_at,
        "machine": machine(),
        "database": {"sqlite": "sqlite3"}.get(connection.vendor, connection.vendor),
        "load_at_start": load_at_start,
        "rate": rate,
        "viewers": viewers,
        "events_streamed": int(rate * seconds),
        "worker_checks_during_streams": checks_during if with_worker else "no worker",
        "repeats": streams,
        "latency_ms": summary(streams),
        "pair_events": pair_events,
        "pair_repeats": pairs,
        "pair": summary(pairs) if pairs else {},
        "long_run_events": events,
        "window": settings.HARNESS_TRACE_WINDOW,
        "page_ms": {
            "median": round(statistics.median(o[0] for o in opens) * 1000, 1),
            "p90": round(percentile([o[0] for o in opens], 0.9) * 1000, 1),
        },
        "page_to_live_ms": {
            "median": round(statistics.median(o[1] for o in opens) * 1000, 1),
            "p90": round(percentile([o[1] for o in opens], 0.9) * 1000, 1),
        },
        "page_kib": round(statistics.median(o[2] for o in opens) / 1024, 1),
    }


def recheck_cost(rounds: int, per_round: int = 50) -> dict[str, Any]:
    """What a live socket's session recheck at each heartbeat costs the web process
    (every socket, every beat): CPU per recheck (all threads), statements and database
    connections opened per recheck, through channels' database_sync_to_async (a user's
    notice; each beat's before it had a thread of its own) and on the feeds' rechecks
    thread, which keeps its connection, interleaved round by round."""
    import asyncio

    user = bench_operator()
    from channels.db import database_sync_to_async
    from django.conf import settings
    from django.db import connection
    from django.db.backends.signals import connection_created
    from django.test.utils import CaptureQueriesContext

    from live import feeds
    from live.consumers import access_problem
    from live.session_sockets import current_user

    run_id = new_run(user)
    key = session_cookie(user).split(f"{settings.SESSION_COOKIE_NAME}=")[1].split(";")[0]

    def read() -> tuple[int, str] | None:
        return access_problem(current_user(key), run_id)

    with CaptureQueriesContext(connection) as statements:
        assert read() is None, "the bench's viewer may not watch its run"
    opened: list[object] = []
    connection_created.connect(lambda **_: opened.append(None), weak=False)
    ways: dict[str, Any] = {
        "database_sync_to_async": lambda: database_sync_to_async(read)(),
        "rechecks_thread": lambda: feeds.on_recheck_thread(read),
    }
    cpu: dict[str, list[float]] = {name: [] for name in ways}
    connections: dict[str, int] = dict.fromkeys(ways, 0)

    async def beats(way: Any) -> None:
        for _ in range(per_round):
            assert await way() is None

    for _ in range(rounds):
        for name, way in ways.items():
            opened.clear()
            started = time.process_time()
            asyncio.run(beats(way))
            cpu[name].append((time.process_time() - started) * 1000 / per_round)
            connections[name] += len(opened)
    return {
        "date": now(),
        "load": load(),
        "statements_per_recheck": len(statements.captured_queries),
        **{
            name: {
                "cpu_ms_per_recheck_median": round(statistics.median(cpu[name]), 2),
                "rounds": [round(ms, 2) for ms in cpu[name]],
                "connections_opened_per_recheck": round(connections[name] / (rounds * per_round), 2),
            }
            for name in ways
        },
    }


def presentation_counts(events: int) -> dict[str, Any]:
    """Instructions of a feed's read of 500 events and of the run page's HTML (``--callgrind``),
    in a child under callgrind on a database prepared here."""
    user = bench_operator()
    run_id = new_run(user)
    fill(run_id, events)
    page, html = parts([__file__, "--count-child", run_id, str(user.pk)], 2, env=ENV)
    return {"date": now(), "load": load(), "events": events, "read_page_500_instructions": page, "run_page_html_instructions": html}


def count_child(run_id: str, user_id: int) -> None:
    """Under callgrind: each part once to warm (imports, the patterns of hidden characters,
    the templates), then counted."""
    import django

    django.setup()
    from django.contrib.auth.models import User
    from django.test import Client

    from live.feeds import read_page

    client = Client(HTTP_HOST="127.0.0.1")
    client.force_login(User.objects.get(pk=user_id))

    def feed_read() -> None:
        assert read_page(run_id, 0) is not None

    def html() -> None:
        response = client.get(f"/runs/{run_id}/")
        assert response.status_code == 200, response.status_code

    for part in (feed_read, html):
        part()
        measured(part)


def write_doc(r: dict[str, Any]) -> None:
    """Add this run to docs/performance-history.md under "Live trace", above the earlier runs,
    which stay for comparison."""
    section = (
        f"### {r['date']}\n\n"
        f"`python bench/trace_latency.py` on a {r['machine']}, load {r['load_at_start']} at the start: one Daphne "
        f"process, the Redis pub/sub channel layer, {r['database']}, all on one machine. A writer process commits one event per "
        f"transaction at a steady {r['rate']:.0f} events/s for {r['events_streamed']} events while {r['viewers']} "
        "WebSocket viewers watch the run, and a Celery worker runs sandbox checks for other runs "
        f"({r['worker_checks_during_streams']} checks during the streams); latency is from each event's commit (an "
        "on_commit hook that runs before the broadcast) to its arrival in each viewer, on the same clock. Target: p99 "
        f"under 100 ms in every repeat; here {r['latency_ms']['repeats_with_p99_under_100ms']}. Then two writer processes "
        f"commit {r['pair_events']} events each to one run, singles and batches of up to 5, as fast as they can; "
        '"missing" counts deliveries a viewer still lacked '
        f"{GRACE_SECONDS} s after the last write.\n\n"
        f"{table(r)}\n\n"
    )
    text = DOC.read_text() if DOC.exists() else "# Performance history\n"
    heading = "## Live trace\n\n"
    text = text.replace(heading, heading + section, 1) if heading in text else text.rstrip("\n") + "\n\n" + heading + section
    DOC.write_text(text.rstrip("\n") + "\n")


def own_postgres() -> str:
    """Create this bench's own database and point every process at it."""
    import psycopg

    name = f"bench_{PREFIX.replace('-', '_')}"
    with psycopg.connect(f"{POSTGRES}/postgres", autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    ENV["DATABASE_URL"] = os.environ["DATABASE_URL"] = f"{POSTGRES}/{name}"
    return name


def drop_postgres(name: str) -> None:
    import psycopg

    with psycopg.connect(f"{POSTGRES}/postgres", autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rate", type=float, default=200)
    parser.add_argument("--seconds", type=float, default=10)
    parser.add_argument("--viewers", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--pair-events", type=int, default=2000, help="events per writer in the two-writer streams")
    parser.add_argument("--pair-repeats", type=int, default=3)
    parser.add_argument("--postgres", action="store_true", help="a PostgreSQL database of its own on 127.0.0.1 instead of SQLite")
    parser.add_argument("--no-worker", action="store_true", help="measure without a worker running checks")
    parser.add_argument("--events", type=int, default=10_000)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--write-doc", action="store_true")
    parser.add_argument("--recheck-cost", type=int, metavar="ROUNDS", help="only the cost of a socket's session recheck at a heartbeat")
    parser.add_argument("--callgrind", action="store_true", help="only the instructions of a feed's read and of the run page")
    parser.add_argument("--count-child", nargs=2, help=argparse.SUPPRESS)
    parser.add_argument("--writer", nargs=5, help=argparse.SUPPRESS)
    parser.add_argument("--viewers-process", dest="viewers_args", nargs=6, help=argparse.SUPPRESS)
    parser.add_argument("--open", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.writer:
        run_id, rate, count, batch, out = args.writer
        write_events(run_id, float(rate), int(count), int(batch), Path(out))
        return
    if args.viewers_args:
        url, cookie, origin, count, expected, out = args.viewers_args
        viewers_process(url, cookie, origin, int(count), int(expected), Path(out))
        return
    if args.open:
        base, run_id, cookie = args.open
        print(json.dumps([open_page(base, run_id, cookie) for _ in range(10)]))
        return
    if args.count_child:
        run_id, user_id = args.count_child
        count_child(run_id, int(user_id))
        return
    # A terminated bench still stops its Daphne (measure's finally runs on SystemExit).
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    database = own_postgres() if args.postgres else None
    if args.recheck_cost or args.callgrind:
        try:
            print(json.dumps(recheck_cost(args.recheck_cost) if args.recheck_cost else presentation_counts(args.events), indent=2))
        finally:
            shutil.rmtree(VAR, ignore_errors=True)
            if database:
                drop_postgres(database)
        return
    try:
        result = measure(
            args.rate, args.seconds, args.viewers, args.repeats, args.pair_events, args.pair_repeats, args.events, not args.no_worker
        )
    finally:
        shutil.rmtree(VAR, ignore_errors=True)
        if database:
            drop_postgres(database)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(f"Live trace on {result['machine']} ({result['date']}, load {result['load_at_start']})\n")
        print(table(result))
    if args.write_doc:
        write_doc(result)


if __name__ == "__main__":
    main()
