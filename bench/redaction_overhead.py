"""What masking secrets at the persistence boundary costs a checkpoint: the harness
loop with SQLite checkpoints (bench/loop_overhead.py's no-op steps) with the redacted
columns as they are, against the same columns with masking switched off, alternated
in one process; plus masking alone on a large state snapshot.

    python bench/redaction_overhead.py [--steps N] [--rounds R] [--json]"""

from __future__ import annotations

import argparse
import atexit
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    var_dir = tempfile.mkdtemp(prefix="bench-")
    atexit.register(shutil.rmtree, var_dir, True)
    os.environ.update({"DEBUG": "1", "DJANGO_SETTINGS_MODULE": "harness_site.settings", "HARNESS_VAR_DIR": var_dir})
    os.environ.pop("DATABASE_URL", None)
    import django

    django.setup()
    from django.conf import settings
    from django.core.management import call_command
    from django.db import models

    from approvals.policies import current_policy_row
    from bench.loop_variants import harness_loop
    from common import redact
    from core.fences import RowLock
    from runs.models import Run
    from runs.persistence.store import DjangoStore

    # A few configured secrets, as a server with provider keys and a database password has.
    settings.HARNESS_SECRET_VALUES = [f"secret-value-{n:02d}-{'x' * 24}" for n in range(6)]
    call_command("migrate", verbosity=0)
    import runs.persistence.eventlog

    # Masking happens where a checkpoint serialises its values (events and state, once
    # each) and, for the other redacted columns, in the column. Off: the same
    # serialisation with nothing looked for.
    masking = (
        runs.persistence.eventlog.masked_each,  # type: ignore[attr-defined]  # the name runs.persistence.eventlog imported, swapped below
        redact.MaskedHead.masked,
        redact.RedactedJSONField.get_db_prep_value,
        redact.RedactedTextField.get_prep_value,
    )

    def plain_json(self: Any, value: Any, connection: Any, prepared: bool = False) -> Any:
        if isinstance(value, redact.MaskedJSON):
            return connection.ops.adapt_json_value(value, redact._AsWritten)
        return models.JSONField.get_db_prep_value(self, value, connection, prepared)

    unmasked = (
        lambda values, secrets: [(value, redact.MaskedJSON(redact._dumps(value))) for value in values],
        lambda self, rest, secrets: redact.MaskedJSON(self.head + rest),
        plain_json,
        models.TextField.get_prep_value,
    )

    def switch(on: bool) -> None:
        chosen = masking if on else unmasked
        runs.persistence.eventlog.masked_each = chosen[0]  # type: ignore[attr-defined]  # the name it imported
        redact.MaskedHead.masked = chosen[1]  # type: ignore[method-assign]  # swapped for the measurement, put back after
        redact.RedactedJSONField.get_db_prep_value, redact.RedactedTextField.get_prep_value = chosen[2], chosen[3]  # type: ignore[method-assign]  # swapped for the measurement, put back after

    per_step: dict[bool, list[float]] = {True: [], False: []}
    warmup = Run.objects.create(task_id="bench", objective="warm up", contract={}, policy=current_policy_row(), proposer={})
    harness_loop(args.steps, DjangoStore(RowLock("the bench's driver")), str(warmup.pk))
    for _ in range(args.rounds):
        for on in (False, True):
            switch(on)
            run = Run.objects.create(task_id="bench", objective="measure", contract={}, policy=current_policy_row(), proposer={})
            per_step[on].append(harness_loop(args.steps, DjangoStore(RowLock("the bench's driver")), str(run.pk)))
    switch(True)
    # A model run's state is mostly its conversation: 200 messages of 5 kB of code.
    line = "    total = sum(item.price * item.quantity for item in order.items)  # cents\n"
    snapshot = {"proposer_state": {"messages": [{"role": "tool", "content": line * 70} for _ in range(200)]}}
    size = len(json.dumps(snapshot))
    start = time.perf_counter()
    for _ in range(20):
        redact.redact(snapshot)
    mask_ms = (time.perf_counter() - start) / 20 * 1000
    plain, masked = statistics.median(per_step[False]), statistics.median(per_step[True])
    result = {
        "step_ms_unmasked": round(plain * 1000, 3),
        "step_ms_masked": round(masked * 1000, 3),
        "masked_over_unmasked": round(masked / plain, 3),
        "state_bytes": size,
        "mask_state_ms": round(mask_ms, 3),
        "steps": args.steps,
        "rounds": args.rounds,
    }
    print(json.dumps(result) if args.json else "\n".join(f"{k}: {v}" for k, v in result.items()))


if __name__ == "__main__":
    main()
