import secrets
import uuid

from django.core.exceptions import ValidationError
from django.db import models

from common.redact import RedactedJSONField, RedactedTextField
from notifications import messages


def new_secret() -> str:
    return secrets.token_hex(32)


class WebhookEndpoint(models.Model):
    """Where notifications go. Each request is signed with this endpoint's secret.

    An endpoint of a project gets its runs' notifications alone, and is its admins' to
    manage; one of no project is site-wide (every run's), and the site admins'."""

    class Kind(models.TextChoices):
        APPROVAL_REQUESTED = messages.APPROVAL_REQUESTED, "an approval is requested"
        APPROVAL_EXPIRED = messages.APPROVAL_EXPIRED, "an approval request expires"
        RUN_STOPPED = messages.RUN_STOPPED, "a run stops (including complete)"

    class Format(models.TextChoices):
        JSON = "json", "JSON (signed)"
        SLACK = "slack", "Slack-compatible message"

    name = models.CharField(max_length=100)
    url = models.URLField(max_length=500, help_text="http(s) address that receives a POST per notification")
    secret = models.CharField(
        max_length=200,
        default=new_secret,
        help_text="signs each request (X-Harness-Signature); give it to the receiver, never to the agent",
    )
    event_kinds = models.JSONField(default=list, help_text="which kinds of notification this endpoint gets")
    format = models.CharField(max_length=10, choices=Format.choices, default=Format.JSON)
    active = models.BooleanField(default=True)
    # CASCADE, not SET_NULL: a project's endpoint must not become a site-wide one,
    # told of every project's runs, when its project goes.
    project = models.ForeignKey(
        "projects.Project",
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="webhooks",
        help_text="its runs' notifications alone; empty: every run's (site-wide, for site admins)",
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    def clean(self) -> None:
        kinds = self.event_kinds
        if not isinstance(kinds, list) or not kinds or any(kind not in self.Kind.values for kind in kinds):
            raise ValidationError({"event_kinds": f"a non-empty list of: {', '.join(self.Kind.values)}"})


class Delivery(models.Model):
    """One notification for one endpoint: recorded in the same transaction as the
    event it is about, then sent (and retried) by a worker."""

    class Status(models.TextChoices):
        PENDING = "pending"
        DELIVERED = "delivered"
        FAILED = "failed"

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    endpoint = models.ForeignKey(WebhookEndpoint, on_delete=models.CASCADE, related_name="deliveries")
    event = models.ForeignKey("runs.Event", on_delete=models.CASCADE, related_name="+")
    kind = models.CharField(max_length=30, choices=WebhookEndpoint.Kind.choices)
    payload = RedactedJSONField(help_text="the body sent, before signing")
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.PENDING, db_index=True)
    attempts = models.PositiveIntegerField(default=0)
    status_code = models.PositiveSmallIntegerField(null=True, blank=True, help_text="of the last attempt")
    # The receiver's answer is never stored (only its status code and timing): a
    # stored body would let whoever edits endpoints read internal services.
    last_error = RedactedTextField(blank=True, default="", help_text="why the last attempt got no answer, if it did not")
    next_retry_at = models.DateTimeField(null=True, blank=True, db_index=True)
    delivered_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at"]
        verbose_name_plural = "deliveries"
        constraints = [models.UniqueConstraint(fields=["endpoint", "event"], name="delivery_unique_endpoint_event")]

    def __str__(self) -> str:
        return f"{self.kind} to {self.endpoint_id} ({self.status})"


class DeliveryAttempt(models.Model):
    """Each POST of a delivery, as it went."""

    delivery = models.ForeignKey(Delivery, on_delete=models.CASCADE, related_name="attempt_log")
    number = models.PositiveIntegerField()
    at = models.DateTimeField()
    status_code = models.PositiveSmallIntegerField(null=True, blank=True)
    error = RedactedTextField(blank=True, default="")
    duration_ms = models.PositiveIntegerField()

    class Meta:
        ordering = ["delivery", "number"]
        constraints = [models.UniqueConstraint(fields=["delivery", "number"], name="attempt_unique_number")]


class MailPreference(models.Model):
    """Which of a project's approval requests a person is mailed about. No row: all."""

    class Choice(models.TextChoices):
        ALL = "all", "every request I may decide"
        NAMED = "named", "only requests whose rule names me or my group"
        NONE = "none", "none"

    user = models.ForeignKey("auth.User", on_delete=models.CASCADE, related_name="mail_preferences")
    project = models.ForeignKey("projects.Project", on_delete=models.CASCADE, related_name="mail_preferences")
    choice = models.CharField(max_length=10, choices=Choice.choices, default=Choice.ALL)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["user", "project"], name="mail_preference_once")]

    def __str__(self) -> str:
        return f"{self.user_id} in {self.project_id}: {self.choice}"


class Mail(models.Model):
    """One email to one person: recorded with the event it is about (or by the beat's
    reminder), sent and retried by a worker. Requests for the same person that arrive
    before it is sent join it (a digest); its text is written when it is sent, from
    the requests as they are then."""

    class Kind(models.TextChoices):
        REQUESTED = "requested", "approval requested (or a digest of several)"
        REMINDER = "reminder", "a request expires soon"
        OUTCOME = "outcome", "the requester's notice: decided, expired or cancelled"

    class Status(models.TextChoices):
        PENDING = "pending"
        DELIVERED = "delivered"
        FAILED = "failed"
        SKIPPED = "skipped"  # every request it was about was decided before it left

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    user = models.ForeignKey("auth.User", on_delete=models.CASCADE, related_name="+")
    project = models.ForeignKey("projects.Project", null=True, blank=True, on_delete=models.CASCADE, related_name="+")
    kind = models.CharField(max_length=10, choices=Kind.choices)
    request_ids = models.JSONField(default=list, help_text="the approval requests it is about")
    outcome = models.CharField(max_length=20, blank=True, default="", help_text="for a requester's notice: what happened")
    to = models.EmailField(blank=True, default="", help_text="the address it went to (set when sent)")
    subject = RedactedTextField(blank=True, default="")
    body = RedactedTextField(blank=True, default="", help_text="the text sent (set when sent)")
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.PENDING, db_index=True)
    attempts = models.PositiveIntegerField(default=0)
    last_error = RedactedTextField(blank=True, default="")
    send_after = models.DateTimeField(db_index=True, help_text="not before (a digest waits for more requests)")
    delivered_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.kind} to {self.user_id} ({self.status})"


class MailAttempt(models.Model):
    """Each handing of a mail to the SMTP server, as it went."""

    mail = models.ForeignKey(Mail, on_delete=models.CASCADE, related_name="attempt_log")
    number = models.PositiveIntegerField()
    at = models.DateTimeField()
    error = RedactedTextField(blank=True, default="")
    duration_ms = models.PositiveIntegerField()

    class Meta:
        ordering = ["mail", "number"]
        constraints = [models.UniqueConstraint(fields=["mail", "number"], name="mail_attempt_unique_number")]
