"""Publishing the ledger's head where the operator chose (HARNESS_LEDGER_HEAD_DESTINATION):
a log line, a JSON line appended to a file (best one another account owns), or a
webhook. Whoever keeps the published heads can check a later export against any of
them (``ledger verify FILE --head SEQ:DIGEST``): an export that lost its end, or was
rewritten from some entry on, no longer reaches the head published after it."""

from __future__ import annotations

import json
import logging
import urllib.request
from typing import Any

from django.conf import settings

from ledger.export import head

log = logging.getLogger("harness.ledger")

TIMEOUT_SECONDS = 10


def publish(destination: str | None = None) -> dict[str, Any]:
    """Publish the global chain's head now; returns what was published."""
    where = (settings.HARNESS_LEDGER_HEAD_DESTINATION if destination is None else destination).strip()
    published = head()
    text = json.dumps(published, sort_keys=True)
    if where in ("", "off"):
        return published
    if where == "log":
        log.info("decision ledger head %s:%s %s", published["seq"], published["digest"], text)
    elif where.startswith("file:"):
        with open(where.removeprefix("file:"), "a", encoding="utf-8") as handle:
            handle.write(text + "\n")
    elif where.startswith(("https://", "http://")):
        request = urllib.request.Request(where, data=text.encode(), headers={"Content-Type": "application/json"}, method="POST")  # noqa: S310 - the operator's own URL, http(s) only
        with urllib.request.urlopen(request, timeout=TIMEOUT_SECONDS) as answer:  # noqa: S310
            answer.read()
    else:
        raise ValueError(f"HARNESS_LEDGER_HEAD_DESTINATION: not log, file:<path>, an http(s) URL or off: {where!r}")
    return published
