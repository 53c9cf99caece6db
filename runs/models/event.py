from django.db import models

from common.redact import RedactedJSONField
from core.events import AnyEvent, parse_event
from runs.models.rowid import RowId


class Event(models.Model):
    """The append-only event log. ``seq`` is per run, gap-free and assigned under the
    run row's lock by ``runs.persistence.eventlog.append_events``, the only writer.

    Its one index besides the key is (run, seq): every read of the log names the run,
    which that index's leading column serves, so ``run`` and ``type`` have no index of
    their own (each cost every checkpoint another page written). Receipts and evidence
    likewise rely on unique constraints led by ``run``."""

    id = RowId(primary_key=True, serialize=False, verbose_name="ID")
    run = models.ForeignKey("runs.Run", on_delete=models.CASCADE, related_name="events", db_index=False)
    seq = models.PositiveIntegerField()
    type = models.CharField(max_length=40)
    call_id = models.CharField(max_length=40, null=True, blank=True)
    ts = models.DateTimeField()
    payload = RedactedJSONField()

    class Meta:
        ordering = ["run", "seq"]
        constraints = [models.UniqueConstraint(fields=["run", "seq"], name="event_unique_run_seq")]

    def __str__(self) -> str:
        return f"{self.run_id}#{self.seq} {self.type}"

    def as_dict(self) -> dict:
        return {
            "run_id": str(self.run_id),
            "seq": self.seq,
            "type": self.type,
            "call_id": self.call_id,
            "ts": self.ts.isoformat(),
            "payload": self.payload,
        }

    def typed(self) -> AnyEvent:
        """This row as its typed event (core.events.parse_event)."""
        return parse_event(
            {"run_id": self.run_id, "seq": self.seq, "type": self.type, "call_id": self.call_id, "ts": self.ts, "payload": self.payload}
        )
