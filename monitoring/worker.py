"""A worker's own metrics endpoint, for a host whose processes no web server's
/metrics reads (its multiprocess directory is its own)."""

from __future__ import annotations

from django.conf import settings
from prometheus_client import start_http_server

from common.metrics import host_registry


def serve() -> None:
    port = settings.HARNESS_WORKER_METRICS_PORT
    if not port:
        return
    # A daemon thread of the worker's main process; the figures are every process's
    # of this host, read from their files at each scrape.
    start_http_server(port, addr=settings.HARNESS_WORKER_METRICS_ADDRESS, registry=host_registry())
