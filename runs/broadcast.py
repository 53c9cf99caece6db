"""Live fan-out of committed events to WebSocket viewers. The database is the
record: a broadcast that fails is logged and the viewers catch up by replay."""

from __future__ import annotations

import logging

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer

log = logging.getLogger(__name__)


def run_group(run_id: str) -> str:
    return f"run.{run_id}"


def broadcast_events(run_id: str, events: list[dict]) -> None:
    layer = get_channel_layer()
    if layer is None or not events:
        return
    try:
        async_to_sync(layer.group_send)(run_group(run_id), {"type": "run.events", "events": events})
    except Exception:  # noqa: BLE001 - the stream is best effort; replay fills gaps
        log.warning("broadcast of %d events for run %s failed", len(events), run_id, exc_info=True)
