"""The figures Harness exports to Prometheus (docs/design.md, Metrics).

Every process writes its own figures into the multiprocess directory
(settings.PROMETHEUS_MULTIPROC_DIR, set in the environment before this module is
imported); /metrics adds them up (monitoring.scrape). Labels are bounded: project
slugs, tool names of the registry, event types, outcomes, rules of the policy (named
by the admin, few), model names of the price table. Never a run id, an argument or a
secret."""

from __future__ import annotations

import atexit
import os

from prometheus_client import CollectorRegistry, Counter, Histogram, multiprocess

# Seconds a person takes to answer, up to the longest approval expiry in practice.
WAIT_BUCKETS = (1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600, 4 * 3600, 12 * 3600, 24 * 3600, 72 * 3600)
# Sub-second to a check's many minutes.
EXECUTION_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 900, 1800)
# From a kill's request to the run's stop, and from an event's write to a viewer.
SHORT_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60)

RUNS_STARTED = Counter("harness_runs_started_total", "Runs that started (their first step)", ["project"])
RUNS_ENDED = Counter("harness_runs_ended_total", "Runs that ended, by outcome (complete or the stop's reason)", ["project", "outcome"])
GATE_DECISIONS = Counter(
    "harness_gate_decisions_total",
    "Decisions of the gates on proposed calls: tool (or 'invalid' for one gates 1-3 (parse, resolve, validate) refused), decision, the rule or gate that decided",
    ["tool", "decision", "rule"],
)
APPROVAL_WAIT = Histogram(
    "harness_approval_wait_seconds",
    "How long a run waited for a reviewer, by how the wait ended",
    ["project", "exit"],
    buckets=WAIT_BUCKETS,
)
APPROVALS_EXPIRED = Counter("harness_approval_requests_expired_total", "Approval requests that expired unanswered", ["project"])
SANDBOX_EXECUTION = Histogram(
    "harness_sandbox_execution_seconds", "From an attempt's start to its receipt, by tool", ["tool"], buckets=EXECUTION_BUCKETS
)
KILL_LATENCY = Histogram("harness_kill_latency_seconds", "From a kill's request to the run's stop", ["scope"], buckets=SHORT_BUCKETS)
MODEL_TOKENS = Counter("harness_model_tokens_total", "Tokens the model providers counted, by direction", ["model", "project", "direction"])
MODEL_COST = Counter("harness_model_cost_usd_total", "What the model requests cost, from the price table", ["model", "project"])
MODEL_REQUESTS = Counter("harness_model_requests_total", "Requests to a model provider that were answered", ["model", "project"])
MODEL_PROXY_REQUESTS = Counter(
    "harness_model_proxy_requests_total",
    "Requests of external agents to the model proxy, by provider and the status answered (refusals included)",
    ["provider", "status"],
)
EVENTS_WRITTEN = Counter("harness_events_written_total", "Run events stored, by type", ["type"])
LIVE_LAG = Histogram("harness_live_delivery_lag_seconds", "From an event's time to its delivery to a live viewer", buckets=SHORT_BUCKETS)
DELIVERIES_FAILED = Counter(
    "harness_notification_deliveries_failed_total", "Notification delivery attempts that failed, by channel", ["channel"]
)
LEDGER_ENTRIES = Counter(
    "harness_ledger_entries_total",
    "Decisions recorded in the decision ledger, by kind (gate.allowed, approval.granted, admin.policy_saved...)",
    ["kind"],
)
LEASE_TAKEOVERS = Counter("harness_lease_takeovers_total", "Runs claimed from a worker whose lease ran out")


# run id -> project slug, for the labels. The process that drives a run learns it when
# it picks the run up (runs.services.drive_run), so counting its events after each
# checkpoint reads nothing; others look it up once (monitoring.event_metrics).
# Bounded: cleared whole when full.
RUN_PROJECTS: dict[str, str] = {}
RUN_PROJECTS_KEPT = 10_000


def remember_project(run_id: str, slug: str) -> None:
    if len(RUN_PROJECTS) >= RUN_PROJECTS_KEPT:
        RUN_PROJECTS.clear()
    RUN_PROJECTS[run_id] = slug


def host_registry() -> CollectorRegistry:
    """A registry of every process's figures on this host, read from their files at
    each collection."""
    registry = CollectorRegistry()
    multiprocess.MultiProcessCollector(registry, path=os.environ["PROMETHEUS_MULTIPROC_DIR"])  # type: ignore[no-untyped-call]  # unannotated
    return registry


def process_ended(pid: int) -> None:
    """A process that ended (this one at exit, or a pool's child: Celery's
    worker_process_shutdown) takes its live gauges' files with it; its counters stay
    and keep adding up (prometheus-client's multiprocess mode)."""
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        multiprocess.mark_process_dead(pid)  # type: ignore[no-untyped-call]  # unannotated


# The pid at exit: a forked child inherits this registration.
atexit.register(lambda: process_ended(os.getpid()))
