from django.db import models

from common.redact import RedactedJSONField, RedactedTextField


class CallLedgerEntry(models.Model):
    """One logical tool call: proposed -> validated -> allowed -> started ->
    completed | failed | unknown. A copy of the call ledger in the run state."""

    class State(models.TextChoices):
        PROPOSED = "proposed"
        VALIDATED = "validated"
        ALLOWED = "allowed"
        STARTED = "started"
        COMPLETED = "completed"
        FAILED = "failed"
        UNKNOWN = "unknown"

    run = models.ForeignKey("runs.Run", on_delete=models.CASCADE, related_name="ledger", db_index=False)
    call_id = models.CharField(max_length=40)
    tool = models.CharField(max_length=100)
    args = RedactedJSONField()
    state = models.CharField(max_length=20, choices=State.choices)
    attempts = models.PositiveIntegerField(default=0)
    idempotency_key = models.CharField(max_length=64, null=True, blank=True)
    decision = models.CharField(max_length=10, blank=True, default="")
    rule = models.CharField(max_length=200, blank=True, default="")
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["run", "id"]
        constraints = [models.UniqueConstraint(fields=["run", "call_id"], name="ledger_unique_run_call")]


class Receipt(models.Model):
    """An executor's receipt for one attempt, stored as received (valid or not)."""

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
