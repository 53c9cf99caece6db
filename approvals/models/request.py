import uuid

from django.conf import settings
from django.db import models
from django.utils import timezone

from common.redact import RedactedJSONField, RedactedTextField
from core.lifecycle import OPEN_STATUSES


class ApprovalRequest(models.Model):
    """A reviewer's decision about exactly one call: the key is a digest of the tool,
    the canonical arguments, the revision, the policy version and the fixed effect. A grant is used
    once; a changed revision or policy makes it stale; a run that stops cancels its
    open requests. The allowed status changes are core.lifecycle.REQUEST_TRANSITIONS."""

    class Status(models.TextChoices):
        PENDING = "pending"
        GRANTED = "granted"
        DENIED = "denied"
        CHANGES_REQUESTED = "changes_requested"
        EXPIRED = "expired"
        STALE = "stale"
        CONSUMED = "consumed"
        CANCELLED = "cancelled"

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    run = models.ForeignKey("runs.Run", on_delete=models.CASCADE, related_name="approval_requests")
    call_id = models.CharField(max_length=40)
    tool = models.CharField(max_length=100)
    args = RedactedJSONField()
    revision = models.CharField(max_length=80)
    policy_version = models.PositiveIntegerField()
    key = models.CharField(max_length=64, db_index=True)
    rule = models.CharField(max_length=200)
    diff = RedactedTextField(blank=True, default="")
    # The old side of each file the diff changes ({path: text}), read at ``revision``
    # together with the diff: a reviewer expands the context around a hunk from
    # this, never from the workspace, which moves on (pages.diff_review).
    sources = RedactedJSONField(default=dict, blank=True)
    # An external call's effect, fixed when the request was filed (core.effects):
    # what granting performs, bound into the key; null for workspace writes.
    effect = RedactedJSONField(null=True, blank=True, default=None)
    evidence = RedactedJSONField(default=list)
    requested_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    status = models.CharField(max_length=20, choices=Status.choices, default=Status.PENDING, db_index=True)
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField()
    decided_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    decided_at = models.DateTimeField(null=True, blank=True)  # or when it expired, went stale or was cancelled
    reason = RedactedTextField(blank=True, default="")
    # A request for changes' line comments, each {file, line, text} anchored to a line
    # of the diff's new side; ``reason`` holds them too, as the model read them. Empty
    # for a request decided before comments were kept apart: its reason alone tells it.
    comments = RedactedJSONField(default=list, blank=True)
    consumed_at = models.DateTimeField(null=True, blank=True)
    consumed_by_call = models.CharField(max_length=40, blank=True, default="")
    # The asking rule's reviewers (core.policy.Reviewers): how many distinct people must
    # grant, and, when any are named, who among the project's reviewers may decide.
    needed = models.PositiveSmallIntegerField(default=1)
    eligible_users = models.JSONField(default=list, blank=True)
    eligible_groups = models.JSONField(default=list, blank=True)

    class Meta:
        ordering = ["created_at"]
        permissions = [("decide_approval", "Can grant or deny approval requests")]
        indexes = [models.Index(fields=["run", "key", "status"])]

    def __str__(self) -> str:
        return f"{self.tool} for {self.run_id} ({self.status})"

    def expiry_due(self) -> bool:
        """Open past its expiry: expired, though not yet recorded as such."""
        return self.status in OPEN_STATUSES and self.expires_at <= timezone.now()

    def has_expired(self) -> bool:
        """Expired, recorded or due."""
        return self.status == self.Status.EXPIRED or self.expiry_due()


class ApprovalGrant(models.Model):
    """One person's grant of a request: the request is granted once ``needed`` distinct
    people have; nobody grants twice."""

    request = models.ForeignKey(ApprovalRequest, on_delete=models.CASCADE, related_name="grants")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    comment = RedactedTextField(blank=True, default="")
    at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["at"]
        constraints = [models.UniqueConstraint(fields=["request", "user"], name="grant_once_per_person")]

    def __str__(self) -> str:
        return f"{self.user_id} granted {self.request_id}"
