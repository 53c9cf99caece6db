from django.db import models

from common.redact import RedactedJSONField


class Report(models.Model):
    """The machine-readable final report of a run that stopped or completed."""

    run = models.OneToOneField("runs.Run", on_delete=models.CASCADE, related_name="report", primary_key=True)
    data = RedactedJSONField()
    created_at = models.DateTimeField(auto_now_add=True)
