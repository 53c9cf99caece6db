"""An execution's output as the harness keeps it: every byte spooled to a file (for
the artifact store) and hashed, a bounded head and tail in memory for the receipt's
excerpt, and each chunk shown to a live listener as it arrives."""

from __future__ import annotations

import collections
import hashlib
import os
import tempfile
from pathlib import Path
from typing import Protocol


class OutputListener(Protocol):
    """Watches an execution's output as it arrives (runs.live_output): it must be
    quick and must not fail; the capture stays the record."""

    def write(self, data: bytes) -> None: ...

    def close(self) -> None: ...


class OutputCapture:
    """Streams an execution's output to a spool file, hashing it, and keeps only
    the head and tail in memory; a listener, if any, sees each chunk too."""

    def __init__(self, inline_limit: int, spool_dir: Path | None = None, listener: OutputListener | None = None) -> None:
        self.listener = listener
        self.inline_limit = max(256, inline_limit)
        self._half = self.inline_limit // 2
        self.head = bytearray()
        self._tail: collections.deque[bytes] = collections.deque()
        self._tail_len = 0
        self.total = 0
        self._sha = hashlib.sha256()
        if spool_dir is not None:
            spool_dir.mkdir(parents=True, exist_ok=True)
        fd, name = tempfile.mkstemp(prefix="harness-output-", dir=spool_dir)
        self.path = Path(name)
        self._file = os.fdopen(fd, "wb")

    def write(self, data: bytes) -> None:
        if self.listener is not None:
            self.listener.write(data)
        self.total += len(data)
        self._sha.update(data)
        self._file.write(data)
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
            self._file.close()

    @property
    def sha256(self) -> str:
        return self._sha.hexdigest()

    @property
    def truncated(self) -> bool:
        return self.total > self.inline_limit

    def excerpt(self, ref: str | None) -> str:
        """The whole output when it fits, else its head and tail around a marker."""
        if not self.truncated:
            return bytes(self.head).decode("utf-8", errors="replace")
        last = (bytes(self.head) + b"".join(self._tail))[-self._half :]
        omitted = self.total - self._half - len(last)
        where = f"; full output: {ref}" if ref else ""
        return (
            bytes(self.head[: self._half]).decode("utf-8", errors="replace")
            + f"\n[... {omitted} bytes omitted{where} ...]\n"
            + last.decode("utf-8", errors="replace")
        )

    def discard(self) -> None:
        self.close()
        self.path.unlink(missing_ok=True)
