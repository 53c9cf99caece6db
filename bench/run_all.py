"""Run every benchmark in one go and print one table of their figures (medians,
tails and ratios, each measured within its own run). ``make bench`` calls this;
a run is recorded in docs/performance-history.md, and its figures replace their rows
in docs/performance.md.

    python bench/run_all.py [--quick]

``--quick`` (``make bench QUICK=1``, run by .ci/run) runs every benchmark briefly: its
figures mean little, but a benchmark that no longer runs fails CI instead of rotting
until the next full run."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from machine import load, machine, now  # noqa: E402

BENCHMARKS: dict[str, tuple[list[str], list[str]]] = {
    # name: (full arguments, quick arguments)
    "loop_overhead": (["--callgrind", "100"], ["--steps", "500", "--trials", "3"]),
    "sandbox_overhead": ([], ["--reads", "200", "--checks", "6", "--starts", "3"]),
    "check_floor": ([], ["--pairs", "3", "--no-callgrind"]),
    "kill_latency": ([], ["--trials", "3"]),
    "first_command": ([], ["--pairs", "2", "--runtimes", "runc"]),
    "trace_latency": (
        [],
        ["--seconds", "2", "--repeats", "1", "--viewers", "5", "--pair-events", "300", "--pair-repeats", "1", "--events", "500"],
    ),
    "redaction_overhead": ([], ["--steps", "100", "--rounds", "3"]),
    "repo_scale": ([], ["--sizes", "10,5000", "--rounds", "1", "--calls", "50,50,2", "--run-task", "5"]),
    "diff_cost": ([], ["--difflib-cuts", "50"]),
    "diff_colours": ([], ["--lines", "250"]),
    "rebuild_cost": ([], ["--rounds", "1"]),
    "host_throughput": ([], ["--runs", "3", "--rounds", "1"]),
    "trial_throughput": ([], ["--runs", "3", "--rounds", "1"]),
    "egress_cost": ([], ["--rounds", "1", "--fetches", "3", "--runtimes", "runc"]),
    "observability_cost": ([], ["--steps", "20", "--trials", "1", "--callgrind", "10"]),
    "mcp_cost": ([], ["--rounds", "2", "--calls", "5", "--stdio-calls", "2"]),
    "model_proxy": ([], ["--requests", "10", "--rounds", "1"]),
    "agent_start": ([], ["--rounds", "1", "--calls", "5"]),
    "startup": ([], ["--rounds", "1"]),
    "checkpoint_cursor": ([], ["--statements", "100", "--trials", "2"]),
    "secret_scan_cost": ([], ["--lines", "1000", "--rounds", "1", "--callgrind-lines", "0"]),
    "ledger_cost": ([], ["--steps", "50", "--grants", "10", "--trials", "1"]),
    "policy_look": ([], ["--looks", "200", "--rounds", "2", "--callgrind", "0"]),
}


def environment(name: str) -> dict[str, str]:
    """checkpoint_cursor measures PostgreSQL's binding on a temporary table: any
    database will do, by default the server's own (as loop_overhead's BENCH_PG_URL)."""
    if name == "checkpoint_cursor" and "DATABASE_URL" not in os.environ:
        return {**os.environ, "DATABASE_URL": os.environ.get("BENCH_PG_URL", "postgres://postgres@127.0.0.1:5432/postgres")}
    return dict(os.environ)


def flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(value, dict | list):
        out: dict[str, Any] = {}
        items = value.items() if isinstance(value, dict) else enumerate(value, start=1)
        for key, inner in items:
            out.update(flatten(inner, f"{prefix}.{key}" if prefix else str(key)))
        return out
    return {prefix: value}


def last_json(output: str) -> Any:
    """The JSON document a benchmark printed last (one line, or indented over several)."""
    text = output.strip()
    start = max(text.rfind("\n{"), text.rfind("\n["))
    return json.loads(text[start + 1 :] if start >= 0 else text)


def trial_rows(trials: dict[str, Any] | None) -> list[tuple[str, str, str, str]]:
    """A trial's runs per minute beside the same runs started one by one."""
    if not trials:
        return []
    per_minute, ratio = trials["runs_per_minute"], trials["trial_vs_one_by_one"]
    return [
        (
            f"runs per minute, a trial, {hosts_named}",
            f"{per_minute[f'trial, {hosts_named}']}",
            f"one by one {per_minute[f'one by one, {hosts_named}']}",
            f"{ratio[n]}x",
        )
        for n, hosts_named in (("1", "1 host"), ("2", "2 hosts"))
    ]


def check_floor_rows(floor: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    """run_check beside the SDK's raw exec: wall, requests and instructions."""
    rows: list[tuple[str, str, str, str]] = []
    for command in ("pass", "pytest"):
        found = floor.get(command)
        if not found:
            continue
        requests = found["requests_per_check"]
        extra = f"; requests {requests['run_check']['total']} against {requests['raw']['total']}"
        if "instructions_per_check" in found:
            counts = found["instructions_per_check"]
            extra += f"; instructions {counts['run_check'] / 1e6:.2f} M against {counts['raw'] / 1e6:.2f} M = {found['run_check / raw, instructions']}x"
        rows.append(
            (
                f"run_check, {'`python3 -c pass`' if command == 'pass' else 'pytest'}",
                f"{found['run_check_median_ms']:.0f} ms",
                f"raw SDK exec {found['raw_median_ms']:.0f} ms",
                f"{found['run_check / raw, wall']}x{extra}",
            )
        )
    return rows


def loop_rows(loop: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    """The durable step beside LangGraph's, instructions first where counted."""
    rows: list[tuple[str, str, str, str]] = []
    for where in ("in memory", "sqlite", "postgresql"):
        found = loop.get(where)
        if not found:
            continue
        harness = found["harness"]
        [(peer_name, peer)] = [(k, v) for k, v in found.items() if k.startswith("langgraph")]
        extra = ""
        if where != "in memory":
            if "harness / langgraph, instructions" in found:
                extra += f"; instructions/step {harness['instructions_per_step']:,} against {peer['instructions_per_step']:,}"
                extra += f" = {found['harness / langgraph, instructions']}x"
            extra += f"; CPU {found['harness / langgraph, CPU']}x; statements/step {harness['statements_per_step']} against {peer['statements_per_step']}"
            if harness["wal_bytes_per_step"]:
                extra += f"; WAL bytes/step {harness['wal_bytes_per_step']} against {peer['wal_bytes_per_step']}"
        rows.append(
            (
                f"durable step, {where}",
                f"{harness['us_per_step']} µs",
                f"{peer_name} {peer['us_per_step']} µs",
                f"{found['harness / langgraph']}x{extra}",
            )
        )
    return rows


def first_command_rows(first: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    """A run's container start to its first result, pooled beside started for the run,
    then what each start adds over the floor (a second command in the same container)."""
    rows: list[tuple[str, str, str, str]] = []
    for runtime, found in first.items():
        if not isinstance(found, dict):
            continue  # the image, machine, load and time beside the runtimes
        requests = found["requests_per_start"]
        rows.append(
            (
                f"time to first command, {runtime}",
                f"pooled {found['pooled_median_ms']:.0f} ms (p95 {found['pooled_p95_ms']:.0f})",
                f"a container started for the run {found['cold_median_ms']:.0f} ms",
                f"{found['pooled / cold, wall']}x; requests {requests['pooled']['total']} against {requests['cold']['total']}",
            )
        )
        rows.append(
            (
                f"first command over the floor, {runtime}",
                f"pooled {found['pooled added over the floor, ms']:+.1f} ms",
                f"the floor {found['second_command_median_ms']:.1f} ms; started for the run {found['cold added over the floor, ms']:+.0f} ms",
                f"{found['pooled first / second command, wall']}x the floor; started {found['cold first / second command, wall']}x",
            )
        )
    return rows


def repo_scale_rows(results: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    """side_by_side's rows of repo_scale: run start, and write_file through a run."""
    rows: list[tuple[str, str, str, str]] = []
    for files, found in results.get("repo_scale", {}).get("rows", {}).items():
        p = found["preparation"]
        start = found["run_start_ms"]
        rows.append(
            (
                f"run start, {files} files",
                f"{start:.0f} ms",
                f"git clone --local {p['git_clone_local']:.0f} ms",
                f"{start / p['git_clone_local']:.2f}x; read_file {found['read_file']['median_ms']:.2f} ms, write_file {found['write_file']['median_ms']:.2f} ms",
            )
        )
        run = found.get("through_run_task")
        if run:
            rows.append(
                (
                    f"write_file through a run, {files} files",
                    f"{run['write_file_to_receipt']['median_ms']:.1f} ms to its receipt",
                    "target 10 ms",
                    f"turn {run['write_file_turn']['median_ms']:.1f} ms; read_file {run['read_file_to_receipt']['median_ms']:.1f} ms",
                )
            )
    return rows


def side_by_side(results: dict[str, Any]) -> str:
    """The headline figures in one table: the harness beside its peer or floor, each
    pair measured in the same run."""
    rows = loop_rows(results.get("loop_overhead", {}))
    for engine, found in results.get("sandbox_overhead", {}).get("results", {}).items():
        check, raw = found["run_check_through_harness"]["median_ms"], found["raw_docker_exec_sdk"]["median_ms"]
        rows.append((f"run_check, {engine}", f"{check:.0f} ms", f"raw SDK exec {raw:.0f} ms", f"{check / raw:.2f}x"))
    rows += check_floor_rows(results.get("check_floor", {}))
    trace = results.get("trace_latency", {}).get("latency_ms")
    if trace:
        rows.append(
            (
                "live trace p99, 200 ev/s x 20 viewers",
                f"worst {trace['worst_p99']} ms",
                "target 100 ms",
                f"{trace['repeats_with_p99_under_100ms']} under",
            )
        )
    rows += first_command_rows(results.get("first_command", {}))
    kill = results.get("kill_latency")
    if kill:
        rows.append(("kill switch to stopped", f"{kill['median_s'] * 1000:.0f} ms median", "", f"max {kill['max_s'] * 1000:.0f} ms"))
    rows += repo_scale_rows(results)
    redaction = results.get("redaction_overhead")
    if redaction:
        rows.append(
            (
                "masking secrets, SQLite step",
                f"{redaction['step_ms_masked']} ms",
                f"unmasked {redaction['step_ms_unmasked']} ms",
                f"{redaction['masked_over_unmasked']}x",
            )
        )
    scan = results.get("secret_scan_cost")
    if scan:
        rows.append(
            (
                f"secret scan, {scan['lines']}-line diff",
                f"{scan['harness_cpu_ms']} ms CPU",
                f"detect-secrets scan_diff {scan['detect_secrets_cpu_ms']} ms",
                f"{scan['harness / detect_secrets']}x",
            )
        )
    observed = results.get("observability_cost", {}).get("variants")
    if observed:
        for variant in ("metrics", "metrics+traces"):
            row = observed[variant]
            rows.append(
                (
                    f"durable step with {variant}",
                    f"{row['cpu_us_per_step']} µs CPU",
                    f"off {observed['off']['cpu_us_per_step']} µs CPU",
                    f"{row['cpu_ratio_to_off']}x",
                )
            )
    for transport, found in results.get("mcp_cost", {}).get("results", {}).items():
        gated, sdk = found["harness_gated"]["median_ms"], found["sdk_session_per_call"]["median_ms"]
        rows.append(
            (
                f"MCP call, {transport.split(' ')[0]}, gated",
                f"{gated:.1f} ms",
                f"SDK, a session per call {sdk:.1f} ms",
                f"{found['harness_gated / sdk_session_per_call']}x; the gates {found['added_ms_per_call_by_the_gates']} ms",
            )
        )
    hosts = results.get("host_throughput")
    if hosts:
        rows.append(
            (
                "runs per minute, two worker hosts",
                f"{hosts['two_hosts_runs_per_minute']}",
                f"one host {hosts['one_host_runs_per_minute']}",
                f"{hosts['ratio_two_vs_one']}x (one machine's cores)",
            )
        )
    rows += trial_rows(results.get("trial_throughput"))
    widths = [max(len(row[i]) for row in [("figure", "harness", "peer or floor", "ratio"), *rows]) for i in range(4)]
    lines = [
        "| "
        + " | ".join(cell.ljust(width) for cell, width in zip(("figure", "harness", "peer or floor", "ratio"), widths, strict=True))
        + " |"
    ]
    lines.append("| " + " | ".join("-" * width for width in widths) + " |")
    lines += ["| " + " | ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)) + " |" for row in rows]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="fewer repetitions, for a smoke run")
    args = parser.parse_args()
    failed = []
    results: dict[str, Any] = {}
    # The machine is often shared: its load is recorded beside the figures, here and
    # in each benchmark's own output, so a run can be judged and compared later.
    print(f"make bench, {now()}, {machine()}, load {load()} (1, 5, 15 min)")
    print(f"{'benchmark':18} {'figure':58} value")
    for name, (full, quick) in BENCHMARKS.items():
        started = time.monotonic()
        command = [sys.executable, str(HERE / f"{name}.py"), "--json", *(quick if args.quick else full)]
        result = subprocess.run(command, capture_output=True, text=True, env=environment(name))
        if result.returncode != 0:
            failed.append(name)
            print(f"{name:18} FAILED ({result.returncode}): {result.stderr.strip().splitlines()[-1:]}")
            continue
        results[name] = last_json(result.stdout)
        figures = flatten(results[name])
        for key, value in figures.items():
            print(f"{name:18} {key:58} {value}")
        print(f"{name:18} {'(seconds to run)':58} {time.monotonic() - started:.0f}")
        print(f"{name:18} {'(load when done)':58} {load()}")
    print()
    print(side_by_side(results))
    if failed:
        raise SystemExit(f"failed: {', '.join(failed)}")


if __name__ == "__main__":
    main()
