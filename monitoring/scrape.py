"""What /metrics answers: every process's figures from the multiprocess directory,
added up, and the runs' states read from the database at the scrape (a gauge kept
in each process's files would need every process to agree; the database does)."""

from __future__ import annotations

import hmac
import ipaddress
from collections.abc import Iterator

from django.conf import settings
from django.db.models import Count
from prometheus_client import generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from common.metrics import host_registry
from runs.models import Run


class RunStates(Collector):
    """harness_runs{project, state}: running (driven now), waiting (for a reviewer),
    queued (behind its project's limit)."""

    def collect(self) -> Iterator[GaugeMetricFamily]:
        family = GaugeMetricFamily("harness_runs", "Runs not yet ended, by state", labels=["project", "state"])
        active = Run.objects.filter(status__in=[Run.Status.RUNNING, Run.Status.WAITING])
        counts = active.values_list("project__slug", "status", "queued").annotate(n=Count("pk"))
        for slug, status, queued, n in counts:
            state = "waiting" if status == Run.Status.WAITING else "queued" if queued else "running"
            family.add_metric([slug, state], n)
        yield family


def scrape(*, with_runs: bool) -> bytes:
    """The exposition text of this host's processes; ``with_runs`` adds the database's
    gauges (the web server's /metrics; a worker's own endpoint has no need to)."""
    registry = host_registry()
    if with_runs:
        registry.register(RunStates())
    return generate_latest(registry)


def check_scraper(authorization: str, address: str) -> bool:
    """May this client read the figures: the configured bearer token, or an address
    in the allowed networks."""
    token = settings.HARNESS_METRICS_TOKEN
    if token and authorization.startswith("Bearer "):
        return hmac.compare_digest(authorization.removeprefix("Bearer ").encode(), token.encode())
    try:
        client = ipaddress.ip_address(address)
    except ValueError:
        return False
    return any(client in network for network in settings.HARNESS_METRICS_NETWORKS)
