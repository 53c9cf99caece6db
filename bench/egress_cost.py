"""What a check's egress costs, measured in one run against the real Docker engine,
under every runtime asked for (runc and gVisor's runsc by default):

- the same check (a bare Python start-up) through ``run_check`` with egress allowed
  (the relay started beside it, the per-call proxy in the worker) and without network,
  interleaved: the fixed cost of turning egress on for a call;
- a check that installs a one-module wheel with pip from a PEP 503 index on loopback,
  through the proxy (what a real check's dependency step costs end to end);
- per connection: a small file fetched over a fresh connection through the proxy from
  inside the container, against the same fetch from the worker straight to the server
  (the added latency is the difference of the medians);
- a large file through the proxy against the same file fetched directly (throughput).

    python bench/egress_cost.py [--rounds N] [--fetches N] [--runtimes runc,runsc] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from machine import load  # noqa: E402
from machine import machine as describe_machine  # noqa: E402

from core.contract import WorkspaceSource  # noqa: E402
from core.policy import CheckDef, Destination, SandboxLimits  # noqa: E402
from core.ports import Call  # noqa: E402
from core.simulated import MemoryArtifacts  # noqa: E402
from sandbox.container.sandbox_container import SandboxContainer  # noqa: E402
from sandbox.container.spec import ContainerSpec  # noqa: E402
from sandbox.executor import SandboxExecutor  # noqa: E402
from sandbox.tools.context import MemoryOutbox, ToolSettings  # noqa: E402
from sandbox.workspace.preparation import prepare_workspace  # noqa: E402
from tests.package_index import PIP_ZIPAPP, build_pip_zipapp, pip_install, serve_index  # noqa: E402

SMALL = "small.bin"
LARGE = "large.bin"
LARGE_BYTES = 32 * 1024 * 1024
FETCH = """
import json, sys, time, urllib.request
url, n = sys.argv[1], int(sys.argv[2])
times = []
for _ in range(n):
    began = time.perf_counter()
    urllib.request.urlopen(url, timeout=30).read()
    times.append(time.perf_counter() - began)
print(json.dumps(times))
"""
DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def run(executor: SandboxExecutor, check: CheckDef) -> tuple[float, dict[str, Any]]:
    call = Call("bench", f"c-{uuid.uuid4().hex[:8]}", "run_check", "1", {"check_id": check.check_id}, 1, None, 1_000_000, check)
    began = time.perf_counter()
    result: Any = executor.execute(call)
    return time.perf_counter() - began, result["data"]


def fetched(data: dict[str, Any]) -> list[float]:
    if data.get("exit_code") != 0:
        raise RuntimeError(f"the fetch check failed: {data.get('output')}")
    times: list[float] = json.loads(str(data["output"]).strip().splitlines()[-1])
    return times


def direct(url: str, n: int) -> list[float]:
    times = []
    for _ in range(n):
        began = time.perf_counter()
        DIRECT.open(url, timeout=30).read()
        times.append(time.perf_counter() - began)
    return times


def ms(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {"median_ms": statistics.median(ordered) * 1000, "p90_ms": ordered[int(0.9 * (len(ordered) - 1))] * 1000, "n": len(ordered)}


def measure(runtime: str, rounds: int, fetches: int, image: str) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="harness-bench-egress-") as tmp:
        base = Path(tmp)
        source = base / "source"
        source.mkdir()
        build_pip_zipapp(source / PIP_ZIPAPP)
        workspace = prepare_workspace(base / "run", WorkspaceSource(kind="path", path=str(source)), ROOT, (ROOT, base))
        limits = SandboxLimits(runtime=runtime)
        with serve_index(base / "index") as index:
            (base / "index" / SMALL).write_bytes(os.urandom(1024))
            (base / "index" / LARGE).write_bytes(os.urandom(LARGE_BYTES))
            allowed = [Destination(host="localhost", port=index.port)]
            small = f"http://localhost:{index.port}/{SMALL}"
            large = f"http://localhost:{index.port}/{LARGE}"
            plain = CheckDef(check_id="plain", command=["python3", "-c", "pass"])
            with_egress = plain.model_copy(update={"egress": allowed})
            pip = CheckDef(check_id="pip", command=pip_install(index), timeout_seconds=300, egress=allowed)
            many = CheckDef(check_id="fetch", command=["python3", "-c", FETCH, small, str(fetches)], egress=allowed)
            once = CheckDef(check_id="large", command=["python3", "-c", FETCH, large, "1"], timeout_seconds=300, egress=allowed)
            container = SandboxContainer.start(
                f"bench-egress-{runtime}", workspace.dir, ContainerSpec.from_limits(limits, image), scope="bench"
            )
            try:
                executor = SandboxExecutor(
                    "bench", workspace, container, MemoryArtifacts(), MemoryOutbox(), ToolSettings(write_paths=("x",))
                )
                run(executor, plain), run(executor, with_egress)  # warm-up
                without: list[float] = []
                egress: list[float] = []
                pips: list[float] = []
                proxied: list[float] = []
                straight: list[float] = []
                large_proxied: list[float] = []
                large_straight: list[float] = []
                for _ in range(rounds):
                    without.append(run(executor, plain)[0])
                    egress.append(run(executor, with_egress)[0])
                    seconds, data = run(executor, pip)
                    if data.get("exit_code") != 0:
                        raise RuntimeError(f"pip failed: {data.get('output')}")
                    pips.append(seconds)
                    proxied += fetched(run(executor, many)[1])
                    straight += direct(small, fetches)
                    large_proxied += fetched(run(executor, once)[1])
                    large_straight += direct(large, 1)
            finally:
                container.remove()
    proxied_ms, straight_ms = ms(proxied), ms(straight)
    mb = LARGE_BYTES / 1024 / 1024
    return {
        "check_without_network": ms(without),
        "check_with_egress": ms(egress),
        "egress_over_none": statistics.median(egress) / statistics.median(without),
        "pip_install_check": ms(pips),
        "fetch_through_proxy": proxied_ms,
        "fetch_direct_from_worker": straight_ms,
        "added_ms_per_connection": proxied_ms["median_ms"] - straight_ms["median_ms"],
        "large_through_proxy_mb_s": mb / statistics.median(large_proxied),
        "large_direct_mb_s": mb / statistics.median(large_straight),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--fetches", type=int, default=20)
    parser.add_argument("--runtimes", default="runc,runsc")
    parser.add_argument("--image", default=os.environ.get("HARNESS_SANDBOX_IMAGE", "harness-sandbox:latest"))
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    results = {runtime: measure(runtime, args.rounds, args.fetches, args.image) for runtime in args.runtimes.split(",")}
    out = {"benchmark": "egress_cost", "machine": describe_machine(), "load": load(), "results": results}
    if args.json:
        print(json.dumps(out, indent=2))
        return
    for runtime, found in results.items():
        print(f"== {runtime}")
        for key, value in found.items():
            print(f"  {key}: {json.dumps(value) if isinstance(value, dict) else round(value, 3)}")


if __name__ == "__main__":
    main()
