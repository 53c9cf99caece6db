from django.db import models

from common.redact import RedactedJSONField
from runs.models.rowid import RowId


class Evidence(models.Model):
    """A check's result, bound to the revision it checked. Only executor receipts
    create these; nothing the model or tool output says does."""

    id = RowId(primary_key=True, serialize=False, verbose_name="ID")
    run = models.ForeignKey("runs.Run", on_delete=models.CASCADE, related_name="evidence", db_index=False)
    call_id = models.CharField(max_length=40)
    check_id = models.CharField(max_length=64)
    check_version = models.CharField(max_length=40)
    command = RedactedJSONField()
    exit_code = models.IntegerField(null=True)
    timed_out = models.BooleanField(default=False)
    duration_ms = models.PositiveIntegerField()
    image_digest = models.CharField(max_length=200, blank=True)
    revision = models.CharField(max_length=80, db_index=True)
    policy_version = models.PositiveIntegerField()
    output_ref = models.CharField(max_length=80, null=True, blank=True)
    passed = models.BooleanField()
    recorded_at = models.DateTimeField()

    class Meta:
        ordering = ["run", "recorded_at"]
        constraints = [models.UniqueConstraint(fields=["run", "call_id"], name="evidence_unique_call")]
