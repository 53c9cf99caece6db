"""The latest lines of a running call's output, for the people watching the run.

While a check runs, its output is spooled to the artifact store (the record); the
watchers also get its last lines, at most every ``interval`` seconds, capped and
redacted like everything else, through the run's channel group. Nothing here is
written to the event log: live output is ephemeral, and the final output stays the
check's artifact."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from common.redact import redact_text, secret_values
from runs.persistence.broadcast import broadcast_output

INTERVAL_SECONDS = 0.5
MAX_LINES = 20
MAX_CHARS = 4000


class LiveOutput:
    """Receives a call's output bytes (``sandbox.container.output.OutputListener``) and
    publishes the tail: at once for the first chunk, then at most every
    ``interval``; a chunk that arrives inside the interval is sent when it ends, so
    the last lines before a quiet spell are never held back."""

    def __init__(
        self,
        run_id: str,
        call_id: str,
        *,
        publish: Callable[[str, dict[str, Any]], None] = broadcast_output,
        interval: float = INTERVAL_SECONDS,
        max_lines: int = MAX_LINES,
        max_chars: int = MAX_CHARS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._clock = clock
        self.run_id, self.call_id = run_id, call_id
        self._publish, self.interval = publish, interval
        self.max_lines, self.max_chars = max_lines, max_chars
        self._tail = b""
        self._total = 0
        self._sent_at = 0.0
        self._timer: threading.Timer | None = None
        self._closed = False
        # The driving thread writes; a timer thread may publish at the same time.
        self._lock = threading.Lock()
        self._secrets = secret_values()

    def write(self, data: bytes) -> None:
        with self._lock:
            if self._closed:
                return
            self._total += len(data)
            # Bytes, not characters: keep enough for max_chars of multi-byte text.
            self._tail = (self._tail + data)[-self.max_chars * 4 :]
            wait = self._sent_at + self.interval - self._clock()
            if wait <= 0:
                self._send_locked()
            elif self._timer is None:
                self._timer = threading.Timer(wait, self._send_later)
                self._timer.daemon = True
                self._timer.start()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None

    def _send_later(self) -> None:
        with self._lock:
            self._timer = None
            if not self._closed:
                self._send_locked()

    def _send_locked(self) -> None:
        self._sent_at = self._clock()
        self._publish(self.run_id, self.snapshot())

    def snapshot(self) -> dict[str, Any]:
        text = redact_text(self._tail.decode("utf-8", errors="replace"), self._secrets)
        lines = text.splitlines()[-self.max_lines :]
        shown = "\n".join(lines)[-self.max_chars :]
        return {"call_id": self.call_id, "lines": shown.split("\n") if shown else [], "total_bytes": self._total}
