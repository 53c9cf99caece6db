from django.conf import settings
from django.db import models


class PolicyVersion(models.Model):
    """One immutable version of the server policy (core.policy.Policy as JSON).
    Editing a policy creates a new row. A run records the version it started with;
    its gates decide under the newest (docs/design.md, Approvals)."""

    version = models.PositiveIntegerField(unique=True)
    document = models.JSONField()
    note = models.CharField(max_length=300, blank=True, default="")
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-version"]

    def __str__(self) -> str:
        return f"policy v{self.version}"
