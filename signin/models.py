from django.conf import settings
from django.db import models


class Identity(models.Model):
    """Who a provider says signed in: its issuer and subject, the pair OpenID Connect
    promises is stable and never reassigned. Users are found by this, never by email
    or username: a provider account whose email matches a local admin's must not
    become that admin."""

    user = models.OneToOneField(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="identity")
    issuer = models.CharField(max_length=300)
    subject = models.CharField(max_length=255)
    # The provider's groups at the last sign-in, as it sent them (bounded), for the admin.
    groups = models.JSONField(default=list, blank=True)
    last_signed_in_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        verbose_name_plural = "identities"
        constraints = [models.UniqueConstraint(fields=["issuer", "subject"], name="identity_unique_issuer_subject")]

    def __str__(self) -> str:
        return f"{self.subject} at {self.issuer}"
