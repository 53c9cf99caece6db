from django.db import models

from common.redact import RedactedJSONField, RedactedTextField


class PendingEffect(models.Model):
    """A write whose outcome is unknown. While unresolved it blocks further writes
    and completion of its run."""

    run = models.ForeignKey("runs.Run", on_delete=models.CASCADE, related_name="pending_effects", db_index=False)
    call_id = models.CharField(max_length=40)
    tool = models.CharField(max_length=100)
    args = RedactedJSONField()
    kind = models.CharField(max_length=20)
    idempotency_key = models.CharField(max_length=64, null=True, blank=True)
    reason = RedactedTextField()
    resolved = models.BooleanField(default=False)
    applied = models.BooleanField(null=True)
    resolution = RedactedTextField(blank=True, default="")

    class Meta:
        constraints = [models.UniqueConstraint(fields=["run", "call_id"], name="pending_unique_call")]
