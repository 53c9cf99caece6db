from typing import Any

from django.conf import settings
from django.db import models

from projects.models import default_project_id


class PolicyVersion(models.Model):
    """One immutable version of a project's policy (core.policy.Policy as JSON).
    Editing a policy creates a new row, numbered after the project's newest: versions
    count within a project. A run records the version it started with; its gates
    decide under its project's newest (docs/design.md, Approvals)."""

    # Whose policy: a project's runs decide under its versions alone, and only its
    # admins (or a site admin) see and edit them (projects.access).
    project = models.ForeignKey("projects.Project", on_delete=models.PROTECT, related_name="policies")
    version = models.PositiveIntegerField()
    document = models.JSONField()
    note = models.CharField(max_length=300, blank=True, default="")
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-version"]
        # Two admins saving at once both take max+1: this makes one of them retry.
        constraints = [models.UniqueConstraint(fields=["project", "version"], name="policy_version_unique_per_project")]

    def __str__(self) -> str:
        return f"policy v{self.version}"

    def save(self, *args: Any, **kwargs: Any) -> None:
        # A version that names no project is the default project's (what every version
        # was before projects). Not a field default: that would read the database
        # whenever a row is only built, as the checks' tests build one.
        if self.project_id is None:
            self.project_id = default_project_id()
        super().save(*args, **kwargs)
