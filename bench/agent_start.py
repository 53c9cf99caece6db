"""An outside agent's costs (issue 41), interleaved round by round:

- ``agent_start``: a run's agent container started by the launcher (runs.agents.launch:
  the token minted, the agent image's container with its relay, ``--version`` run in
  it) until ``agent_started`` is in the run's log; then the agent is let go (its
  container removed);
- ``mcp_call``: one ``tools/call`` of ``read_file`` through the run's MCP endpoint
  (Daphne, gateway/mcp_endpoint.py) with the SDK's client keeping one session, as the
  CLIs do, while the run is driven in this process (runs.runtime.advance, the agent
  proposer waiting on the bridge): the call as the agent sees it, with the HTTP
  requests it took and, over a few more calls watched with Redis' MONITOR (untimed),
  the Redis commands on the run's bridge keys per call, endpoint and worker together;
  ``agent_turn``: each interval between two consecutive calls' ``proposed`` events in
  that run (the client's whole round trip included);
- ``builtin_call``: the same ``read_file`` proposed by Harness's own scripted loop: (a
  run with ``calls`` reads less the same run without them) / ``calls``, one figure a
  round; ``builtin_turn``: each interval between two consecutive reads' ``proposed``
  events in the run with them, one whole turn of the loop (every read but the first).

Daphne and this process share their own SQLite database and container scope; the
agent image must be built (``bash sandbox/agent/image/build.sh``).

    python bench/agent_start.py [--rounds N] [--calls N] [--preset claude-code] [--json]
"""

from __future__ import annotations

import argparse
import json
import math
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
import urllib.error
import urllib.request
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from machine import load, machine, now  # noqa: E402

VAR = Path(tempfile.mkdtemp(prefix="bench-agent-"))
SCOPE = f"bench-agent-{uuid.uuid4().hex[:8]}"
BASE_ENV = {
    "DEBUG": "1",
    "DJANGO_SETTINGS_MODULE": "harness_site.settings",
    "HARNESS_VAR_DIR": str(VAR),
    "DATABASE_URL": f"sqlite:///{VAR / 'harness.sqlite3'}",
    "HARNESS_SANDBOX_SCOPE": SCOPE,
}
os.environ.update(BASE_ENV)
READ: dict[str, Any] = {"tool": "read_file", "args": {"path": "orders/total.py"}}


def summary(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    tail = ordered[math.ceil(0.9 * len(ordered)) - 1]
    return {"median_ms": round(statistics.median(ordered) * 1000, 2), "p90_ms": round(tail * 1000, 2), "n": len(ordered)}


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def daphne() -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    log = open(VAR / "daphne.log", "wb")  # noqa: SIM115 - closed with the process
    proc = subprocess.Popen(
        [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port), "harness_site.asgi:application"],
        cwd=ROOT,
        env={**os.environ, **BASE_ENV, "PYTHONUNBUFFERED": "1"},
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError((VAR / "daphne.log").read_text()[-3000:])
        try:
            with urllib.request.urlopen(f"{url}/accounts/login/", timeout=2):
                return proc, url
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            time.sleep(0.1)
    raise RuntimeError("daphne did not start")


def agent_start(operator: Any, preset: str) -> float:
    """Seconds from the launch to ``agent_started`` in the run's log."""
    from runs import placement
    from runs.agents.launch import PresetLauncher, let_go
    from runs.agents.proposer import Launch
    from runs.models import Event
    from runs.runtime import create_run
    from runs.scheduling import leases
    from tests.runs_waiting import DEMO_CONTRACT

    config = {"kind": "agent", "preset": preset}
    run = create_run(DEMO_CONTRACT, config, operator, enqueue=False)
    run_id = str(run.pk)
    placement.prepare(run)
    token = leases.acquire(run_id, "bench")
    assert token is not None
    try:
        began = time.perf_counter()
        session = PresetLauncher(preset)(Launch(run_id, config, (), lease_token=token))
        elapsed = time.perf_counter() - began
        if session.failure() or not Event.objects.filter(run_id=run_id, type="agent_started").exists():
            raise RuntimeError(f"the agent did not start: {session.failure()}")
        return elapsed
    finally:
        let_go(run_id)
        leases.release(run_id, token)


PROBES = 10


class BridgeCommands:
    """The Redis commands that touch a run's bridge keys (runs.agents.bridge), both
    sides, read from Redis' MONITOR while it is on: a script is one command (one round
    trip), whatever it does inside. Redis is shared, so only the run's keys are counted;
    the timed calls are made with it off, since MONITOR slows every command down."""

    def __init__(self, run_id: str) -> None:
        import redis
        from django.conf import settings

        from runs.agents.bridge import prefix

        self.prefix = prefix(run_id)
        self.client = redis.Redis.from_url(settings.REDIS_URL)
        self.end = self.prefix + "monitor-end"
        self.seen: dict[str, int] = {}
        self.on = threading.Event()
        self.thread = threading.Thread(target=self._watch, daemon=True)
        self.thread.start()
        self.on.wait(10)

    def _watch(self) -> None:
        with self.client.monitor() as monitor:  # type: ignore[no-untyped-call]
            self.on.set()
            while True:
                found = monitor.next_command()
                if self.end in found["command"]:
                    return
                if found["client_type"] != "lua" and self.prefix in found["command"]:
                    name = found["command"].split(" ", 1)[0].upper()
                    self.seen[name] = self.seen.get(name, 0) + 1

    def stop(self) -> dict[str, int]:
        # A command MONITOR shows ends the watch (a blocked read cannot be interrupted).
        self.client.exists(self.end)
        self.thread.join(10)
        self.client.close()
        return dict(sorted(self.seen.items()))


def mcp_calls(operator: Any, url: str, calls: int) -> tuple[list[float], list[int], dict[str, float], list[float]]:
    """Per call through the endpoint, one SDK session for all (a warm call first), the
    HTTP requests each call took, then, over PROBES more calls with MONITOR on, the
    Redis commands on the run's bridge keys per call, and the run's turns (proposal to
    proposal) over the timed calls."""
    import anyio
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    from runs.agents.tokens import mint
    from runs.control import kill
    from runs.runtime import advance, create_run
    from tests.runs_waiting import DEMO_CONTRACT

    limits = {**DEMO_CONTRACT["limits"], "max_proposals": calls + PROBES + 5, "max_tool_calls": calls + PROBES + 5}
    run = create_run({**DEMO_CONTRACT, "limits": limits}, {"kind": "agent", "preset": "mcp-client"}, operator, enqueue=False)
    token = mint(run)
    driver = threading.Thread(target=advance, args=(str(run.pk),), daemon=True)
    driver.start()
    requests: list[int] = []
    seen = [0]

    async def count(_request: Any) -> None:
        seen[0] += 1

    commands: dict[str, float] = {}

    async def work() -> list[float]:
        times = []
        headers = {"Authorization": f"Bearer {token}"}
        async with (
            httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(120), event_hooks={"request": [count]}) as http,
            Client(streamable_http_client(f"{url}/agent/runs/{run.pk}/mcp/", http_client=http), mode="legacy", cache=None) as client,
        ):
            await client.list_tools()
            for index in range(calls + 1):
                seen[0] = 0
                began = time.perf_counter()
                result = await client.call_tool(READ["tool"], READ["args"], read_timeout_seconds=120)
                if result.is_error:
                    raise RuntimeError(f"read_file failed: {result.content}")
                if index:  # the first is the warm-up (the worker's first proposal)
                    times.append(time.perf_counter() - began)
                    requests.append(seen[0])
            # The commands of a whole call, both sides: the worker answers the last probe
            # before it waits for the next call, which MONITOR sees once the client has the answer.
            watching = BridgeCommands(str(run.pk))
            for _ in range(PROBES):
                await client.call_tool(READ["tool"], READ["args"], read_timeout_seconds=120)
            await anyio.sleep(0.5)
            commands.update({name: count / PROBES for name, count in watching.stop().items()})
        return times

    try:
        found: list[float] = anyio.run(work)
    finally:
        kill(run, operator, reason="the benchmark is done")
        driver.join(60)
    return found, requests, commands, turns(run.pk)[: calls - 1]


def turns(run_id: Any) -> list[float]:
    """Each interval between two consecutive proposals of a run (its ``proposed``
    events' times), from the second on: the first includes the run's start."""
    from runs.models import Event

    proposed = [ts.timestamp() for ts in Event.objects.filter(run_id=run_id, type="proposed").order_by("seq").values_list("ts", flat=True)]
    return [b - a for a, b in zip(proposed[1:], proposed[2:], strict=False)]


def builtin_call(operator: Any, calls: int) -> tuple[float, list[float]]:
    """Seconds per read_file in Harness's own scripted loop, two ways: a run with
    ``calls`` reads less the same run without them, back to back, per read (one figure
    a round, which a busy machine moves a lot: the runs' own start and end differ from
    run to run); and each interval between two consecutive proposals of the reads (the
    ``proposed`` events' times: one whole turn of the loop, proposal to proposal)."""
    from runs.runtime import advance, create_run
    from tests.runs_waiting import DEMO_CONTRACT

    def run(n: int) -> tuple[float, list[float]]:
        limits = {**DEMO_CONTRACT["limits"], "max_proposals": n + 5, "max_tool_calls": n + 5}
        contract = {**DEMO_CONTRACT, "limits": limits}
        script = [READ] * (n + 1)
        began = time.perf_counter()
        made = create_run(contract, {"kind": "scripted", "script": script}, operator, enqueue=False)
        outcome = advance(str(made.pk))
        if outcome in ("running", "waiting_approval", "leased_elsewhere"):
            raise RuntimeError(f"the run with {n} reads ended {outcome}")
        return time.perf_counter() - began, turns(made.pk)

    with_reads, intervals = run(calls)
    return (with_reads - run(0)[0]) / calls, intervals


def measure(args: argparse.Namespace) -> dict[str, Any]:
    import django

    django.setup()
    from django.contrib.auth.models import Group, User
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    operator = User.objects.create_user("bench-operator")
    operator.groups.add(Group.objects.get(name="operator"))
    proc, url = daphne()
    os.environ["HARNESS_AGENT_GATEWAY_URL"] = url
    from django.conf import settings

    settings.HARNESS_AGENT_GATEWAY_URL = url
    starts: list[float] = []
    agent: list[float] = []
    requests: list[int] = []
    commands: list[dict[str, float]] = []
    builtin: list[float] = []
    builtin_turns: list[float] = []
    turns_of_agent: list[float] = []
    try:
        builtin_call(operator, 2)  # warm: the image, the workspace's source, the imports
        for _ in range(args.rounds):
            starts.append(agent_start(operator, args.preset))
            times, counts, used, agent_turns = mcp_calls(operator, url, args.calls)
            turns_of_agent += agent_turns
            agent += times
            requests += counts
            commands.append(used)
            difference, intervals = builtin_call(operator, args.calls)
            builtin.append(difference)
            builtin_turns += intervals
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(20)
        from sandbox.public import containers_by_run, remove_containers

        for ids in containers_by_run(scope=SCOPE).values():
            remove_containers(ids)
    return {
        "agent_start": {**summary(starts), "preset": args.preset},
        "mcp_call": {
            **summary(agent),
            "http_requests_per_call": statistics.median(requests) if requests else None,
            # Per round: Redis commands on the run's bridge keys per call, by command, and in all.
            "redis_commands_per_call": [{**used, "all": round(sum(used.values()), 2)} for used in commands],
        },
        "builtin_call": {**summary(builtin), "calls_per_round": args.calls},
        "agent_turn": summary(turns_of_agent),
        "builtin_turn": summary(builtin_turns),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--calls", type=int, default=20, help="read_file calls per round, each way")
    parser.add_argument("--preset", default="claude-code", choices=("claude-code", "codex", "gemini-cli"))
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    try:
        results = measure(args)
    finally:
        shutil.rmtree(VAR, ignore_errors=True)
    out = {"benchmark": "agent_start", "date": now(), "machine": machine(), "load": load(), "results": results}
    if args.json:
        print(json.dumps(out, indent=2))
        return
    for kind, found in results.items():
        print(f"{kind}: {json.dumps(found)}")


if __name__ == "__main__":
    main()
