"""A writer OS process for the live-trace stress test: appends a number of notes to
one run, singles and batches of up to eight, as fast as it can, while a share of its
broadcasts is thrown away on the way to Redis. A count, not a duration: the viewers'
work is then the same however busy the machine is.

    python -m tests.live_writer <run-id> <events> <seed> <share lost>

Run with the test's service environment (tests.fixtures_services.service_env):
it prints "ready" once Django is set up, starts writing on a line from stdin, and
ends with a line of how many events it wrote and broadcasts it dropped."""

from __future__ import annotations

import json
import random
import sys
import time
from typing import Any


def lossy(publish: Any, rng: random.Random, share: float, dropped: list[int]) -> Any:
    """The broadcasting thread's publishing of a round, with ``share`` of the runs'
    doorbells lost."""

    def publish_lossy(publisher: Any, messages: list[tuple[str, dict[str, Any]]]) -> None:
        kept = []
        for group, message in messages:
            if message["type"] == "run.doorbell" and rng.random() < share:
                dropped.append(1)
            else:
                kept.append((group, message))
        publish(publisher, kept)

    return publish_lossy


def main() -> None:
    run_id, count, seed, share = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
    import django

    django.setup()
    from core import events as ev
    from core.fences import RowLock
    from runs.persistence import broadcast
    from runs.persistence.eventlog import append_events

    rng = random.Random(seed)
    dropped: list[int] = []
    publisher = broadcast._Publisher
    publisher.publish = lossy(publisher.publish, rng, share, dropped)  # type: ignore[method-assign]  # lost on the way to Redis
    print("ready", flush=True)
    sys.stdin.readline()
    written = 0
    while written < count:
        size = min(count - written, 1 if rng.random() < 0.5 else rng.randint(2, 8))
        notes = [
            ev.ModelNote(run_id=run_id, seq=0, ts=time.time(), kind="stress", detail={"writer": seed, "n": written + i})
            for i in range(size)
        ]
        append_events(run_id, notes, fence=RowLock("a stress writer"))
        written += size
    broadcast.flush_broadcasts()  # sent from a thread that dies with this process
    print(json.dumps({"written": written, "dropped": len(dropped)}), flush=True)


if __name__ == "__main__":
    main()
