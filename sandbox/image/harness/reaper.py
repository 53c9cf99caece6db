"""PID 1 of every sandbox container (``sandbox.container.spec``): it reaps every
orphan, so a check's processes that outlive it (a fork bomb's, a daemon's) leave no
zombie holding a slot of the container's pids limit. Signals from inside the
container cannot kill it (the kernel protects a namespace's init), so the wrapper's
``kill -9 -1`` after each check spares it. Runs as the image's python3 with nothing
but the standard library."""

from __future__ import annotations

import os
import time

# How long PID 1 sleeps when it has no child at all: a check starts one at any time.
IDLE_SECONDS = 0.2


def reap_forever() -> None:
    while True:
        try:
            os.wait()
        except ChildProcessError:
            time.sleep(IDLE_SECONDS)


if __name__ == "__main__":
    reap_forever()
