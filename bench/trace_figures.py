"""The figures of bench/trace_latency.py: percentiles, the web process's CPU and
run-queue time from /proc, the summary of repeated streams and the table of a result."""

from __future__ import annotations

import os
import statistics
from pathlib import Path
from typing import Any


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def cpu_seconds(pid: int) -> float:
    """CPU time (user + system) the process has used so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def scheduler_ns(pid: int) -> tuple[int, int]:
    """Nanoseconds the process's threads spent on a CPU and waiting on a run queue
    (ready to run, no CPU free) so far, from /proc/<pid>/task/*/schedstat."""
    on_cpu = waiting = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            fields = (task / "schedstat").read_text().split()
        except OSError:  # a thread that ended meanwhile
            continue
        on_cpu, waiting = on_cpu + int(fields[0]), waiting + int(fields[1])
    return on_cpu, waiting


def summary(streams: list[dict[str, Any]]) -> dict[str, Any]:
    p99s = [stream["p99"] for stream in streams]
    return {
        "median_of_medians": round(statistics.median(stream["median"] for stream in streams), 2),
        "worst_p99": max(p99s),
        "repeats_with_p99_under_100ms": f"{sum(p < 100 for p in p99s)} of {len(p99s)}",
        "web_cpu_ms_per_1000_deliveries": round(statistics.median(stream["web_cpu_ms_per_1000_deliveries"] for stream in streams), 1),
        "events_per_s": round(statistics.median(stream["events_per_s"] for stream in streams), 1),
        "missing": sum(stream["missing"] for stream in streams),
        "repeated": sum(stream["repeated"] for stream in streams),
    }


def table(r: dict[str, Any]) -> str:
    page, live = r["page_ms"], r["page_to_live_ms"]
    lines = [
        "| commit → arrival | median | p99 | max | deliveries | missing | web CPU per 1000 | web on CPU / waiting for one, per s "
        "| load (1, 5, 15 min) |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    streams = [(f"repeat {n}: {r['rate']:.0f} events/s", stream) for n, stream in enumerate(r["repeats"], start=1)]
    streams += [(f"two writers {n}: {stream['events_per_s']:.0f} events/s", stream) for n, stream in enumerate(r["pair_repeats"], start=1)]
    for name, stream in streams:
        lines.append(
            f"| {name}, {r['viewers']} viewers | {stream['median']:.2f} ms | {stream['p99']:.2f} ms "
            f"| {stream['max']:.2f} ms | {stream['deliveries']} | {stream['missing']} | {stream['web_cpu_ms_per_1000_deliveries']} ms "
            f"| {stream['web_on_cpu_ms_per_s']} / {stream['web_runqueue_wait_ms_per_s']} ms | {stream['load']} |"
        )
    lines += [
        "",
        "| opening a run | median | p90 | n |",
        "| --- | ---: | ---: | ---: |",
        f"| {r['long_run_events']:,} events: page HTML ({r['page_kib']} KiB, last {r['window']} events) | {page['median']:.1f} ms "
        f"| {page['p90']:.1f} ms | 10 |",
        f"| same, HTML + socket replay until live | {live['median']:.1f} ms | {live['p90']:.1f} ms | 10 |",
    ]
    return "\n".join(lines)
