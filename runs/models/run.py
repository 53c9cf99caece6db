import uuid

from django.conf import settings
from django.db import models

from common.redact import RedactedJSONField, RedactedTextField
from projects.models import default_project_id


class Run(models.Model):
    """One agent run. ``state`` is the core's RunState, the source of truth for
    resuming; the other columns are copies of it for listing and filtering."""

    class Status(models.TextChoices):
        RUNNING = "running"
        WAITING = "waiting_approval"
        COMPLETE = "complete"
        STOPPED = "stopped"

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    task_id = models.CharField(max_length=100, db_index=True)
    objective = RedactedTextField()
    contract = RedactedJSONField()
    policy = models.ForeignKey("approvals.PolicyVersion", on_delete=models.PROTECT, related_name="runs")
    # Whose run it is: who may see it, decide its requests and stop it (projects.access).
    project = models.ForeignKey("projects.Project", on_delete=models.PROTECT, related_name="runs", default=default_project_id)
    proposer = RedactedJSONField(help_text="how to rebuild the proposer: kind and its configuration")
    state = RedactedJSONField(null=True)
    status = models.CharField(max_length=20, choices=Status.choices, default=Status.RUNNING, db_index=True)
    outcome = models.CharField(max_length=40, default="running", db_index=True)
    stop_message = RedactedTextField(blank=True, default="")
    revision = models.CharField(max_length=80, blank=True, default="")
    proposals = models.PositiveIntegerField(default=0)
    calls = models.PositiveIntegerField(default=0)
    last_seq = models.PositiveIntegerField(default=0)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    # The lease: which worker drives the run, until when, and the fencing token
    # every checkpoint must still hold.
    lease_owner = models.CharField(max_length=200, blank=True, default="")
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    lease_token = models.PositiveBigIntegerField(default=0)
    kill_requested = models.BooleanField(default=False)
    # Where the run's workspace lives: the worker host that prepared or last rebuilt it
    # (its HARNESS_WORKER_HOST), which resumes the run while it lives (runs/scheduling/hosts.py),
    # and what it was made from (kind, path or url, ref and the commit checked out), so
    # another host can rebuild it at the same commit (runs/placement.py).
    host = models.CharField(max_length=200, blank=True, default="")
    workspace_source = models.JSONField(null=True, blank=True)
    # The project's queue (runs.project_queue): a queued run waits for a slot and no
    # worker drives it; an admitted run holds one of its project's slots
    # (Project.active_runs) until it ends.
    queued = models.BooleanField(default=False)
    holds_slot = models.BooleanField(default=False)
    # The ended run this one re-runs (same contract, proposer, project and policy: runs.rerun).
    rerun_of = models.ForeignKey("self", null=True, blank=True, on_delete=models.SET_NULL, related_name="reruns")

    class Meta:
        ordering = ["-created_at"]
        indexes = [
            models.Index(fields=["status", "created_at"]),
            # The queue, read oldest first per project; only queued runs are in it.
            models.Index(fields=["project", "created_at"], condition=models.Q(queued=True), name="run_queue"),
        ]

    def __str__(self) -> str:
        return f"{self.task_id} ({self.id})"
