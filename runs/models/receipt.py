from django.db import models

from common.redact import RedactedJSONField, RedactedTextField
from runs.models.rowid import RowId


class Receipt(models.Model):
    """An executor's receipt for one attempt, stored as received (valid or not)."""

    id = RowId(primary_key=True, serialize=False, verbose_name="ID")
    run = models.ForeignKey("runs.Run", on_delete=models.CASCADE, related_name="receipts", db_index=False)
    call_id = models.CharField(max_length=40)
    attempt = models.PositiveIntegerField()
    valid = models.BooleanField()
    problem = RedactedTextField(blank=True, default="")
    body = RedactedJSONField(null=True)
    harness_revision = models.CharField(max_length=80)
    event_seq = models.PositiveIntegerField()

    class Meta:
        ordering = ["run", "event_seq"]
        constraints = [models.UniqueConstraint(fields=["run", "call_id", "attempt"], name="receipt_unique_attempt")]
