"""An execution's output as the harness keeps it: up to ``store_limit`` bytes spooled to
a file (for the artifact store), a bounded head and tail in memory for the receipt's
excerpt, and each chunk shown to a live listener as it arrives.

Past ``store_limit`` nothing more is written: the bytes are counted, the tail is kept
in memory, and closing the capture ends the spool file with a notice of the cut and
that tail (what a failing test prints last), all within ``store_limit``. A check that
prints a gigabyte leaves an artifact of ``store_limit`` bytes and costs the worker's
disk nothing more."""

from __future__ import annotations

import collections
import os
import tempfile
from pathlib import Path
from typing import Protocol

# A check's own output, as stored: enough for any test run's log, small enough that a
# run's checks cannot fill a worker's disk (HARNESS_CHECK_OUTPUT_MAX_MB).
DEFAULT_STORE_LIMIT = 8 << 20


class OutputListener(Protocol):
    """Watches an execution's output as it arrives (runs.persistence.live_output): it must be
    quick and must not fail; the capture stays the record."""

    def write(self, data: bytes) -> None: ...

    def close(self) -> None: ...


class OutputCapture:
    """Streams an execution's output to a spool file up to ``store_limit`` bytes and
    keeps only the head and tail in memory; a listener, if any, sees each chunk too."""

    def __init__(
        self,
        inline_limit: int,
        spool_dir: Path | None = None,
        listener: OutputListener | None = None,
        store_limit: int = DEFAULT_STORE_LIMIT,
    ) -> None:
        self.listener = listener
        self.inline_limit = max(256, inline_limit)
        self.store_limit = max(0, store_limit)
        self._half = self.inline_limit // 2
        self.head = bytearray()
        self._tail: collections.deque[bytes] = collections.deque()
        self._tail_len = 0
        self.total = 0
        # What the spool file holds of the output (the cut notice aside).
        self.spooled = 0
        if spool_dir is not None:
            spool_dir.mkdir(parents=True, exist_ok=True)
        fd, name = tempfile.mkstemp(prefix="harness-output-", dir=spool_dir)
        self.path = Path(name)
        self._file = os.fdopen(fd, "wb")

    def write(self, data: bytes) -> None:
        if self.listener is not None:
            self.listener.write(data)
        self.total += len(data)
        room = self.store_limit - self.spooled
        if room > 0:
            kept = data[:room]
            self._file.write(kept)
            self.spooled += len(kept)
        room = self.inline_limit - len(self.head)
        if room > 0:
            self.head += data[:room]
            data = data[room:]
        if data:
            self._tail.append(data)
            self._tail_len += len(data)
            while self._tail and self._tail_len - len(self._tail[0]) >= self._half:
                self._tail_len -= len(self._tail.popleft())

    def close(self) -> None:
        if self.listener is not None:
            self.listener.close()
        if not self._file.closed:
            if self.cut:
                self._end_cut_spool()
            self._file.close()

    @property
    def truncated(self) -> bool:
        """Whether the excerpt leaves bytes out."""
        return self.total > self.inline_limit

    @property
    def cut(self) -> bool:
        """Whether the stored output leaves bytes out (past ``store_limit``)."""
        return self.total > self.store_limit

    def _last(self, size: int) -> bytes:
        """The output's last ``size`` bytes, at most half the inline limit (the tail
        memory holds is contiguous that far)."""
        size = min(size, self._half)
        return (bytes(self.head) + b"".join(self._tail))[-size:] if size > 0 else b""

    def _end_cut_spool(self) -> None:
        """Shorten the spool so that its head, a notice of the cut and the output's
        last bytes (at most a quarter of the limit) fit in ``store_limit``."""
        tail = self._last(self.store_limit // 4)
        kept = self.spooled
        while True:
            # The notice's length depends on the numbers it holds: shorten the head
            # until head, notice and tail fit (each round only shortens it).
            notice = (
                f"\n[harness: output cut: the first {kept} of {self.total} bytes are stored above and the last {len(tail)} below;"
                f" {self.total - kept - len(tail)} bytes between them were not stored]\n"
            ).encode()
            fits = max(0, min(self.spooled, self.store_limit - len(notice) - len(tail)))
            if fits >= kept:
                break
            kept = fits
        self._file.truncate(kept)
        self._file.seek(kept)
        self._file.write(notice + tail)
        self.spooled = kept

    def excerpt(self, ref: str | None) -> str:
        """The whole output when it fits, else its head and tail around a marker."""
        if not self.truncated:
            return bytes(self.head).decode("utf-8", errors="replace")
        last = self._last(self._half)
        omitted = self.total - self._half - len(last)
        where = f"; {'stored output (cut)' if self.cut else 'full output'}: {ref}" if ref else ""
        return (
            bytes(self.head[: self._half]).decode("utf-8", errors="replace")
            + f"\n[... {omitted} bytes omitted{where} ...]\n"
            + last.decode("utf-8", errors="replace")
        )

    def discard(self) -> None:
        self.close()
        self.path.unlink(missing_ok=True)
