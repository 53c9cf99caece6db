"""One execution in a sandbox container, apart from the container itself: the
command that runs it under the image's wrapper (its timeout, the kill of whatever it
left behind, scratch emptied before and after: sandbox/image/harness/check.sh), the
result, the watch that may stop it, and how the engine's account tells the command's
own end from the container's failure."""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sandbox.container.engine import ENGINE_ERRORS
from sandbox.container.output import OutputCapture
from sandbox.container.spec import CHECK_WRAPPER

log = logging.getLogger(__name__)

DEADLINE_GRACE_SECONDS = 2.0
STREAM_GRACE_SECONDS = 1.0


def wrapped(argv: list[str], timeout_seconds: int, *, on_copy: bool) -> list[str]:
    """The command that runs ``argv`` under the wrapper, in the workspace or in a
    throwaway copy of it."""
    return ["sh", CHECK_WRAPPER, str(timeout_seconds), "copy" if on_copy else "workspace", *argv]


# The wrapper's last bytes on standard error: the command's exit status (check.sh).
EXIT_TRAILER = re.compile(rb"\x1eharness-exit:(\d{1,3})\x1e\Z")
TRAILER_START = b"\x1e"
TRAILER_MARK = b"\x1eharness-exit:"
PARTIAL_TRAILER = re.compile(rb"\x1eharness-exit:\d{0,3}\x1e?")
# As many bytes as the longest trailer: what is held back of standard error until more
# output follows or the stream ends.
TRAILER_MAX = len(b"\x1eharness-exit:255\x1e")
STDERR = 2

# Every sandbox process but PID 1 killed, and the output that says the kill ran (an
# execution that could not start prints nothing): no inspect needed to know.
KILL_ALL = ["sh", "-c", "kill -9 -1 2>/dev/null; echo killed"]
KILLED = b"killed\n"
# A command killed by a signal that was none of ours: how long the engine may take to
# report that the container itself died (a removal or kill from outside).
SETTLE_SECONDS = 1.0


@dataclass(frozen=True)
class ExecResult:
    exit_code: int | None
    timed_out: bool
    duration_ms: int
    oom_killed: bool | None  # None: not detectable on this host
    killed: bool  # by kill() (the kill switch)
    error: str | None = None  # the output stream broke off
    stopped_for: str | None = None  # why ``watch`` had the execution's processes killed
    # The container or the engine failed during the execution (not our kill, not our
    # limits): the exit status is not the command's own and proves nothing.
    lost: str | None = None


class WrapperOutput:
    """A wrapped execution's output as it arrives, into ``capture``, less the wrapper's
    trailer. Standard output and standard error reach the worker through the engine
    independently (a check's last standard output may come after the wrapper's
    trailer), so what could be the trailer or its beginning at the end of standard
    error (from a record separator in its last bytes on) is held back until more
    standard error follows (then it was the command's) or the stream ends (then it is
    read for the status). ``end`` gives the exit status the trailer carried, or None
    when the stream ended without one (the wrapper did not finish: the engine is asked).

    A check could print an imitation of the trailer on standard error: it counts only
    if nothing follows it there, and the wrapper's own always does, unless the wrapper
    itself was killed; the command's exit status is in its own hands anyway."""

    def __init__(self, capture: OutputCapture) -> None:
        self._capture = capture
        self._held = b""

    def write(self, stream: int, data: bytes) -> None:
        if stream == STDERR:
            data = self._held + data
            start = data.find(TRAILER_START, max(0, len(data) - TRAILER_MAX))
            while start >= 0 and not _could_be_trailer(data[start:]):
                start = data.find(TRAILER_START, start + 1)
            self._held = b""
            if start >= 0:
                data, self._held = data[:start], data[start:]
        if data:
            self._capture.write(data)

    def end(self) -> int | None:
        found = EXIT_TRAILER.search(self._held)
        rest = self._held if found is None else self._held[: found.start()]
        self._held = b""
        if rest:
            self._capture.write(rest)
        return None if found is None else int(found.group(1))


def _could_be_trailer(tail: bytes) -> bool:
    """Whether ``tail`` is the wrapper's trailer or how one begins."""
    if len(tail) <= len(TRAILER_MARK):
        return TRAILER_MARK.startswith(tail)
    return PARTIAL_TRAILER.fullmatch(tail) is not None


class ExecWatcher:
    """Asks ``watch`` every ``seconds`` on its own thread until stopped; the first
    reason it gives is kept and ``stop_execution`` is called once.

    ``stop`` does not wait for a ``watch`` call under way (a measurement can take a
    while, and a kill must not wait for it); the lock makes sure that once ``stop``
    has returned, the thread can no longer stop anything, not the next execution."""

    def __init__(self, watch: Callable[[], str | None] | None, seconds: float, stop_execution: Callable[[], None]) -> None:
        self.reason: str | None = None
        self._watch = watch
        self._seconds = seconds
        self._stop_execution = stop_execution
        self._done = threading.Event()
        self._lock = threading.Lock()
        if watch is not None:
            threading.Thread(target=self._run, name="exec-watch", daemon=True).start()

    def _run(self) -> None:
        assert self._watch is not None
        while not self._done.wait(self._seconds):
            try:
                reason = self._watch()
            except Exception:  # one failed look must not end the watch
                log.exception("sandbox: watching an execution failed")
                continue
            with self._lock:
                if self._done.is_set():
                    return
                if reason is not None:
                    self.reason = reason
                    log.warning("sandbox execution stopped: %s", reason)
                    self._stop_execution()
                    return

    def stop(self) -> None:
        with self._lock:
            self._done.set()


def changed_from_outside(before: dict[str, Any], after: dict[str, Any], restarted_by_us: bool) -> str | None:
    """Compare docker's account of the container before and after an execution."""
    if not after.get("Running"):
        if after.get("OOMKilled") and not before.get("OOMKilled"):
            return None  # our memory limit ended it: the check's own result
        status, code = after.get("Status"), after.get("ExitCode")
        return f"the sandbox container was stopped during the check, not by the harness (status {status}, exit code {code})"
    if after.get("StartedAt") != before.get("StartedAt") and not restarted_by_us:
        return "the sandbox container was restarted during the check, not by the harness"
    return None


def execution_exit_code(client: Any, exec_id: str) -> int | None:
    """An execution's exit code once its stream has ended: the engine may still say it
    runs for a moment after, so it is asked again for up to 2 s; None when the engine
    cannot tell."""
    wait_until = time.monotonic() + 2
    while True:
        try:
            info = client.api.exec_inspect(exec_id)
        except ENGINE_ERRORS:
            return None
        if not info.get("Running") or time.monotonic() > wait_until:
            code = info.get("ExitCode")
            return code if isinstance(code, int) else None
        time.sleep(0.01)
