"""Trace export over OTLP/HTTP, off unless HARNESS_TRACES_URL is set (docs/deploy.md,
Traces). Spans are made from the events each checkpoint stored (monitoring.spans)
and handed to a batch processor, whose thread sends them: the run's step waits for
the reads that make them, never for the collector."""

from __future__ import annotations

import atexit
import logging
import threading
from collections.abc import Sequence

from django.conf import settings
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from monitoring.spans import RECENT, Written, spans_for
from runs.models import Event

log = logging.getLogger(__name__)
_lock = threading.Lock()
_exporting: tuple[BatchSpanProcessor, Resource] | None = None


def enabled() -> bool:
    return bool(settings.HARNESS_TRACES_URL)


def _processor() -> tuple[BatchSpanProcessor, Resource]:
    """Made on first use, in the process that uses it (a pool's child, after its fork)."""
    global _exporting
    exporting = _exporting
    if exporting is not None:
        # Made already: a checkpoint's export takes it without the lock.
        return exporting
    with _lock:
        if _exporting is None:
            exporter = OTLPSpanExporter(endpoint=settings.HARNESS_TRACES_URL, timeout=settings.HARNESS_TRACES_TIMEOUT_SECONDS)
            processor = BatchSpanProcessor(exporter, schedule_delay_millis=settings.HARNESS_TRACES_DELAY_MS)
            atexit.register(processor.shutdown)
            _exporting = processor, Resource.create({"service.name": settings.HARNESS_TRACES_SERVICE_NAME})
        return _exporting


def export(rows: Sequence[Event], writer: Written | None = None) -> None:
    """The spans ``rows`` end, sent; ``writer``: what the process that stored them knew
    of them (monitoring.spans.Written)."""
    processor, resource = _processor()
    for span in spans_for(rows, resource, writer=writer):
        processor.on_end(span)


def flush(timeout_millis: int = 10_000) -> bool:
    return _exporting is None or _exporting[0].force_flush(timeout_millis)


def reset() -> None:
    """Shut the exporter down, sending what it holds; the next export makes a new one
    under the settings then in force (the tests, the bench), and forgets what this
    process saw stored (monitoring.spans.Recent)."""
    global _exporting
    with _lock:
        if _exporting is not None:
            _exporting[0].shutdown()  # type: ignore[no-untyped-call]  # unannotated
        _exporting = None
    RECENT.forget()
