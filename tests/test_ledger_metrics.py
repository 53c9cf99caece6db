"""The decision ledger's counter (docs/design.md, Decision ledger, Metrics): a real
Prometheus scrapes a web server (with its bearer token) while a reviewer grants and an
operator kills through its API; ``harness_ledger_entries_total`` counts the entries
by kind of decision, once they are committed."""

from __future__ import annotations

import urllib.request
from collections.abc import Iterator

import pytest
from django.contrib.auth.models import User

from api.models import ApiToken
from ledger.models import Entry
from tests.fixtures_prometheus import Prometheus, Target
from tests.fixtures_web import AsgiServer
from tests.helpers import World
from tests.test_ledger_decisions import waiting
from tests.test_metrics import TOKEN, metrics_web

pytestmark = pytest.mark.django_db(transaction=True)


def post(web: AsgiServer, path: str, user: User) -> int:
    """A POST to the web server's API with a token of ``user``'s."""
    request = urllib.request.Request(
        f"{web.url}{path}",
        data=b"{}",
        method="POST",
        headers={"Authorization": f"Token {ApiToken.issue(user)[1]}", "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        return int(response.status)


@pytest.fixture
def web(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AsgiServer]:
    server = metrics_web(tmp_path_factory.mktemp("daphne"), tmp_path_factory.mktemp("web-metrics"))
    server.start()
    try:
        yield server
    finally:
        server.stop()


def test_it_lets_prometheus_count_the_ledgers_entries_by_kind(
    web: AsgiServer, prometheus: Prometheus, operator: User, reviewer: User, resumes: list[str]
) -> None:
    prometheus.start([Target("web", f"127.0.0.1:{web.port}", token=TOKEN)])
    prometheus.wait_for('sum(up{job="web"})', 1)
    world = World()
    granted_run, request = waiting(world, operator)
    killed_run, _ = waiting(world, operator)
    assert post(web, f"/api/approvals/{request.pk}/grant/", reviewer) == 200
    assert post(web, f"/api/runs/{killed_run.pk}/kill/", operator) == 202
    # The web server's own entries, by kind: the grant, the kill and the request it cancelled.
    prometheus.wait_for('sum(harness_ledger_entries_total{job="web",kind="approval.granted"})', 1)
    prometheus.wait_for('sum(harness_ledger_entries_total{job="web",kind="operator.kill"})', 1)
    prometheus.wait_for('sum(harness_ledger_entries_total{job="web",kind="approval.cancelled"})', 1)
    # No gate decided there: the runs were driven in this process.
    assert prometheus.query('sum(harness_ledger_entries_total{job="web",kind="gate.allowed"}) or vector(0)') == 0
    # What it counted is what the ledger holds of those kinds.
    for kind in ("approval.granted", "operator.kill", "approval.cancelled"):
        assert Entry.objects.filter(kind=kind).count() == 1
    assert Entry.objects.filter(kind="operator.kill", run_id=str(killed_run.pk)).get().actor_kind == "token"
    assert granted_run.pk != killed_run.pk
