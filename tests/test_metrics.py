"""/metrics: a real Prometheus scrapes the web server (with its bearer token) and a
worker (its own endpoint, its own multiprocess directory), while real runs are
denied, wait for a reviewer and are killed; the figures it stores are asserted
through its HTTP API."""

from __future__ import annotations

import ipaddress
import re
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.contrib.auth.models import User
from django.test import override_settings

from api.models import ApiToken
from approvals.models import ApprovalRequest
from harness_site.config import SettingError, load
from monitoring.scrape import check_scraper
from runs.models import Event
from runs.runtime import create_run
from tests.fixtures_prometheus import Prometheus, Target
from tests.fixtures_services import Worker, purge_queue
from tests.fixtures_web import AsgiServer, free_port
from tests.runs_waiting import DEMO_CONTRACT, SCRIPTED_DEMO, wait_for
from tests.test_celery_runs import slow_check_policy

TOKEN = "scrape-token-for-the-test-0123456789"
UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


class Site:
    def __init__(self, web: AsgiServer, worker: Worker, worker_port: int) -> None:
        self.web = web
        self.worker = worker
        self.worker_port = worker_port

    def post(self, path: str, user: User) -> int:
        request = urllib.request.Request(
            f"{self.web.url}{path}",
            data=b"{}",
            method="POST",
            headers={"Authorization": f"Token {ApiToken.issue(user)[1]}", "Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            return int(response.status)

    def log(self) -> str:
        return self.worker.log() + self.web.log()


def metrics_web(log_dir: Path, metrics_dir: Path) -> AsgiServer:
    """The web server of a host of its own; its /metrics wants the token (loopback
    is not an allowed network)."""
    return AsgiServer(
        log_dir, PROMETHEUS_MULTIPROC_DIR=str(metrics_dir), HARNESS_METRICS_TOKEN=TOKEN, HARNESS_METRICS_NETWORKS="192.0.2.0/24"
    )


@pytest.fixture
def site(transactional_db: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    """A web server and a worker as on two hosts: each its own multiprocess directory,
    the worker serving its figures itself."""
    purge_queue()
    web = metrics_web(tmp_path_factory.mktemp("daphne"), tmp_path_factory.mktemp("web-metrics"))
    worker_port = free_port()
    worker = Worker(
        tmp_path_factory.mktemp("worker"),
        env={"PROMETHEUS_MULTIPROC_DIR": str(tmp_path_factory.mktemp("worker-metrics")), "HARNESS_WORKER_METRICS_PORT": str(worker_port)},
    )
    web.start()
    try:
        worker.start()
        try:
            yield Site(web, worker, worker_port)
        finally:
            worker.stop()
            purge_queue()
    finally:
        web.stop()


def read_metrics(url: str, authorization: str | None) -> tuple[int, str]:
    request = urllib.request.Request(url, headers={"Authorization": authorization} if authorization else {})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return int(response.status), response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


@pytest.mark.celery
@pytest.mark.docker
def test_it_lets_prometheus_count_a_denied_call_an_approval_that_waited_and_a_kill(
    site: Site, prometheus: Prometheus, operator: User, reviewer: User
) -> None:
    prometheus.start([Target("web", f"127.0.0.1:{site.web.port}", token=TOKEN), Target("worker", f"127.0.0.1:{site.worker_port}")])
    prometheus.wait_for('sum(up{job=~"web|worker"})', 2)

    # A call outside the contract: denied by rule "contract", the run stops tool_denied.
    contract = {**DEMO_CONTRACT, "allowed_tools": [t for t in DEMO_CONTRACT["allowed_tools"] if t != "publish"]}
    denied = create_run(contract, {"kind": "scripted", "script": [{"tool": "publish", "args": {}}]}, operator)
    assert wait_for(denied, ("stopped",), log=site.log).outcome == "tool_denied"

    # The demo waits for a reviewer, who grants through the web server's API after 2 s.
    waiting = wait_for(create_run(DEMO_CONTRACT, SCRIPTED_DEMO, operator), ("waiting_approval", "stopped"), log=site.log)
    assert waiting.status == "waiting_approval", waiting.outcome
    prometheus.wait_for('sum(harness_runs{job="web",state="waiting"})', 1)
    time.sleep(2)
    request = ApprovalRequest.objects.get(run=waiting, status="pending")
    assert site.post(f"/api/approvals/{request.pk}/grant/", reviewer) == 200
    assert wait_for(waiting, ("complete", "stopped"), log=site.log).outcome == "complete"

    # A slow check, killed through the web server's API while it executes.
    slow_check_policy()
    slow = create_run(
        {**DEMO_CONTRACT, "verification_targets": ["slow"]},
        {"kind": "scripted", "script": [{"tool": "run_check", "args": {"check_id": "slow"}}]},
        operator,
    )
    deadline = time.monotonic() + 60
    while not Event.objects.filter(run=slow, type="call_started").exists():
        assert time.monotonic() < deadline, site.log()[-3000:]
        time.sleep(0.05)
    time.sleep(0.5)
    assert site.post(f"/api/runs/{slow.pk}/kill/", operator) == 202
    assert wait_for(slow, ("stopped",), timeout=30, log=site.log).outcome == "killed"

    # The worker's figures: the gates, the wait, the kill, the sandbox.
    prometheus.wait_for('sum(harness_gate_decisions_total{job="worker",tool="publish",decision="denied",rule="contract"})', 1)
    prometheus.wait_for('sum(harness_runs_started_total{job="worker",project="default"})', 3)
    prometheus.wait_for('sum by (outcome) (harness_runs_ended_total{outcome="tool_denied"})', 1)
    prometheus.wait_for('sum(harness_runs_ended_total{outcome="complete"})', 1)
    prometheus.wait_for('sum(harness_runs_ended_total{outcome="killed"})', 1)
    prometheus.wait_for('sum(harness_approval_wait_seconds_count{project="default",exit="granted"})', 1)
    waited = prometheus.query('sum(harness_approval_wait_seconds_sum{exit="granted"})')
    assert waited is not None and waited >= 2, waited  # it waited at least the test's own pause
    prometheus.wait_for('sum(harness_approval_wait_seconds_bucket{exit="granted",le="1.0"})', 0)
    prometheus.wait_for('sum(harness_kill_latency_seconds_count{scope="run"})', 1)
    latency = prometheus.query("sum(harness_kill_latency_seconds_sum)")
    assert latency is not None and latency > 0, latency  # how small: bench/kill_latency.py
    assert (prometheus.query('sum(harness_sandbox_execution_seconds_count{tool="run_check"})') or 0) >= 2
    assert (prometheus.query('sum(harness_gate_decisions_total{tool="publish",decision="ask"})') or 0) == 1
    # The web server's own: the reviewer's decision and the kill were written there.
    prometheus.wait_for('sum(harness_events_written_total{job="web",type="approval_decided"})', 1)
    prometheus.wait_for('sum(harness_events_written_total{job="web",type="kill_requested"})', 1)
    prometheus.wait_for('sum(harness_runs{job="web"}) or vector(0)', 0)
    # No label anywhere carries a run's (or a request's) id.
    status, text = read_metrics(f"{site.web.url}/metrics", f"Bearer {TOKEN}")
    assert status == 200
    _, worker_text = read_metrics(f"http://127.0.0.1:{site.worker_port}/metrics", None)
    assert "harness_gate_decisions_total" in worker_text
    for exposition in (text, worker_text):
        assert not UUID.search(exposition), UUID.search(exposition)


def test_it_refuses_metrics_without_the_token_outside_the_allowed_networks(transactional_db: None, tmp_path: Path) -> None:
    web = metrics_web(tmp_path, tmp_path)
    web.start()
    try:
        check_refusals(f"{web.url}/metrics")
    finally:
        web.stop()


def check_refusals(url: str) -> None:
    assert read_metrics(url, None)[0] == 401
    assert read_metrics(url, "Bearer not-the-token")[0] == 401
    assert read_metrics(url, f"Token {TOKEN}")[0] == 401
    status, text = read_metrics(url, f"Bearer {TOKEN}")
    assert status == 200 and "# TYPE harness_runs gauge" in text


@override_settings(HARNESS_METRICS_TOKEN="", HARNESS_METRICS_NETWORKS=[ipaddress.ip_network("10.1.0.0/16"), ipaddress.ip_network("::1")])
def test_it_admits_a_scraper_by_network_when_no_token_is_set() -> None:
    assert check_scraper("", "10.1.200.3")
    assert check_scraper("", "::1")
    assert not check_scraper("", "10.2.0.1")
    assert not check_scraper("Bearer anything", "127.0.0.1")
    assert not check_scraper("", "not an address")


def test_it_names_a_bad_network_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HARNESS_METRICS_NETWORKS", "127.0.0.1/32,10.0.0.1/8")
    with pytest.raises(SettingError, match=r"HARNESS_METRICS_NETWORKS .*'10.0.0.1/8'"):
        load()
