from django.db import models


class WorkerHost(models.Model):
    """A worker host's heartbeat: while ``expires_at`` is ahead, the host is alive and the
    runs whose workspace it holds are sent to its own queue (runs/scheduling/hosts.py). Renewed by
    every run worker on the host; a host that stops renewing is taken for gone after
    HARNESS_LEASE_SECONDS, and its runs move to whichever worker claims them next."""

    name = models.CharField(max_length=200, primary_key=True)
    queue = models.CharField(max_length=255)
    seen_at = models.DateTimeField()
    expires_at = models.DateTimeField()

    def __str__(self) -> str:
        return self.name
