"""A worker's own metrics endpoint, for a host whose processes no web server's
/metrics reads (its multiprocess directory is its own)."""

from __future__ import annotations

from django.conf import settings
from prometheus_client import CollectorRegistry, multiprocess, start_http_server


def serve() -> None:
    port = settings.HARNESS_WORKER_METRICS_PORT
    if not port:
        return
    registry = CollectorRegistry()
    multiprocess.MultiProcessCollector(registry, path=str(settings.PROMETHEUS_MULTIPROC_DIR))
    # A daemon thread of the worker's main process; the figures are every process's
    # of this host, read from their files at each scrape.
    start_http_server(port, addr=settings.HARNESS_WORKER_METRICS_ADDRESS, registry=registry)
