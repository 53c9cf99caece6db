"""What the model proxy (gateway/model_proxy.py) adds to one model request of an external
agent, against calling the same model server directly.

The model server is the tests' provider double (tests/agents_support/provider_doubles.py,
on loopback, answering at once with fixed usage numbers), so the difference is the
proxy's: the token's check, the model and budget checks (the run's, the server's, the
project's daily budget), the extra hop, reading the usage on the side and the call's
event written in the database. Daphne serves the app (as in production) on its own
SQLite database; one client (httpx2, keep-alive) sends Anthropic Messages requests,
non-streamed and streamed, alternating direct and proxied request by request. Beside
the wall times, Daphne's CPU time per proxied request (from /proc), which the machine's
load does not change, and the statements of one request's database work.

    python bench/model_proxy.py [--requests N] [--rounds N] [--json]
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

VAR = Path(tempfile.mkdtemp(prefix="bench-model-proxy-"))
SERVER_KEY = "sk-ant-bench-server-key-0123456789"
BASE_ENV = {
    "DEBUG": "1",
    "DJANGO_SETTINGS_MODULE": "harness_site.settings",
    "HARNESS_VAR_DIR": str(VAR),
    "DATABASE_URL": f"sqlite:///{VAR / 'harness.sqlite3'}",
    "HARNESS_SANDBOX_SCOPE": f"bench-proxy-{uuid.uuid4().hex[:8]}",
    "HARNESS_MODEL_PRICES": json.dumps({"claude-bench": {"input": 3.0, "output": 15.0}}),
    "HARNESS_MODEL_MAX_COST_USD": "1000",
    "HARNESS_MODEL_MAX_TOKENS": "1000000000",
}
os.environ.update(BASE_ENV)


def per_request(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    tail = ordered[math.ceil(0.9 * len(ordered)) - 1]
    return {"median_ms": round(statistics.median(ordered) * 1000, 2), "p90_ms": round(tail * 1000, 2), "n": len(ordered)}


def cpu_seconds(pid: int) -> float:
    """The user and system CPU time of a process so far (its children's left out)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def daphne(double_url: str) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    env = {**os.environ, **BASE_ENV, "ANTHROPIC_BASE_URL": double_url, "ANTHROPIC_API_KEY": SERVER_KEY, "PYTHONUNBUFFERED": "1"}
    log = open(VAR / "daphne.log", "wb")  # noqa: SIM115 - closed with the process
    proc = subprocess.Popen(
        [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port), "harness_site.asgi:application"],
        cwd=ROOT,
        env=env,
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=200, help="requests of each kind per round, each path")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    try:
        results = measure(args)
    finally:
        shutil.rmtree(VAR, ignore_errors=True)
    out = {"benchmark": "model_proxy", "date": now(), "machine": machine(), "load": load(), "results": results}
    if args.json:
        print(json.dumps(out, indent=2))
        return
    for kind, found in results.items():
        print(f"== {kind}")
        for key, value in found.items():
            print(f"  {key}: {json.dumps(value)}")


def statements_per_request(token: str, run_id: Any) -> dict[str, Any]:
    """The statements of one proxied, budgeted request's database work, counted in this
    process on the same plain functions the proxy calls (gateway.model_proxy.admit,
    then runs.agents.usage.record): a count the load does not change."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from gateway.model_proxy import admit
    from runs.agents.usage import ModelCall, record

    call = ModelCall("anthropic", "messages", "claude-bench", 200, 1, False, 10, 20)
    with CaptureQueriesContext(connection) as admitting:
        _found, budgeted = admit(token, run_id, True)
    assert budgeted is not None
    with CaptureQueriesContext(connection) as recording:
        record(run_id, call, budgeted[0])
    said = [q["sql"].split(" ", 1)[0].upper() for q in [*admitting.captured_queries, *recording.captured_queries]]
    return {"admit": len(admitting.captured_queries), "record": len(recording.captured_queries), "statements": said}


def measure(args: argparse.Namespace) -> dict[str, Any]:
    import django

    django.setup()
    import httpx2
    from django.core.management import call_command

    from projects.models import Project
    from runs.agents import tokens
    from runs.agents.usage import totals
    from runs.models import Run
    from tests.agents_support.provider_doubles import ProviderDouble
    from tests.helpers import World

    call_command("migrate", verbosity=0)
    # The project's daily budget is on, so each request reads it as a budgeted one would.
    Project.objects.filter(slug="default").update(daily_max_cost_usd=1000.0)
    run = World().create()
    Run.objects.filter(pk=run.pk).update(proposer={"kind": "agent", "agent": "bench", "model": "claude-bench"})
    token = tokens.mint(run)
    # Counted on a run of its own, so the timed run's record holds only the timed requests.
    counted = World().create()
    Run.objects.filter(pk=counted.pk).update(proposer={"kind": "agent", "agent": "bench", "model": "claude-bench"})
    counted_token = tokens.mint(counted)
    statements_per_request(counted_token, counted.pk)  # a warm one: the first opens the connection
    results: dict[str, Any] = {"database": statements_per_request(counted_token, counted.pk)}
    double = ProviderDouble()
    proc, url = daphne(double.url)
    try:
        proxied_base = f"{url}/agent/runs/{run.pk}/anthropic"
        body = {"model": "claude-bench", "max_tokens": 64, "messages": [{"role": "user", "content": "hi"}]}
        with httpx2.Client(timeout=30) as client:
            for kind, streamed in (("messages, not streamed", False), ("messages, streamed", True)):
                asked = {**body, "stream": streamed}

                def once(base: str, key: str, asked: dict[str, Any] = asked) -> float:
                    began = time.perf_counter()
                    answer = client.post(f"{base}/v1/messages", json=asked, headers={"x-api-key": key, "anthropic-version": "2023-06-01"})
                    answer.read()
                    if answer.status_code != 200:
                        raise RuntimeError(f"{answer.status_code}: {answer.text[:300]}")
                    return time.perf_counter() - began

                for _ in range(10):  # warm both paths
                    once(double.url, SERVER_KEY)
                    once(proxied_base, token)
                direct: list[float] = []
                proxied: list[float] = []
                cpu = cpu_seconds(proc.pid)
                for _ in range(args.rounds):
                    for _ in range(args.requests):
                        direct.append(once(double.url, SERVER_KEY))
                        proxied.append(once(proxied_base, token))
                cpu = cpu_seconds(proc.pid) - cpu
                d, p = per_request(direct), per_request(proxied)
                results[kind] = {
                    "direct": d,
                    "through_proxy": p,
                    "overhead_median_ms": round(p["median_ms"] - d["median_ms"], 2),
                    "ratio": round(p["median_ms"] / d["median_ms"], 2),
                    # Daphne's CPU per proxied request (only proxied requests reach it): what load does not change.
                    "proxy_cpu_ms_per_request": round(cpu / len(proxied) * 1000, 2),
                }
        recorded = totals(run.pk).requests
        results["recorded"] = {"model_notes": recorded, "requests_through_proxy": 20 + 2 * args.rounds * args.requests}
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(10)
        double.close()
    return results


if __name__ == "__main__":
    main()
