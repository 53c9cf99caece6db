from django.conf import settings
from django.contrib.auth.models import Group
from django.db import models

from projects.models import Project, Role


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
    # The Harness groups (ids) a sign-in added through a GroupMapping: what a later
    # sign-in may take away again. A group the person held already (given in person)
    # is not in it, and stays.
    granted_groups = models.JSONField(default=list, blank=True, editable=False)

    class Meta:
        verbose_name_plural = "identities"
        constraints = [models.UniqueConstraint(fields=["issuer", "subject"], name="identity_unique_issuer_subject")]

    def __str__(self) -> str:
        return f"{self.subject} at {self.issuer}"


class GroupMapping(models.Model):
    """What an admin chose that a provider group gives at sign-in: one Harness group,
    or one role in one project. A provider group without a mapping gives nothing,
    whatever its name (a directory group called "admin" is not Harness's ``admin``)."""

    provider_group = models.CharField(
        max_length=150, help_text="the group's name (or, for Entra ID, its object id) exactly as the provider sends it"
    )
    group = models.ForeignKey(
        Group, null=True, blank=True, on_delete=models.CASCADE, related_name="provider_mappings", help_text="a Harness group it gives"
    )
    project = models.ForeignKey(
        Project, null=True, blank=True, on_delete=models.CASCADE, related_name="provider_mappings", help_text="or a role in this project"
    )
    role = models.CharField(max_length=20, choices=Role.choices, blank=True, help_text="the role it gives in that project")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["provider_group", "pk"]
        verbose_name = "sign-in group mapping"
        constraints = [
            models.CheckConstraint(
                condition=models.Q(group__isnull=False, project__isnull=True, role="")
                | (models.Q(group__isnull=True, project__isnull=False) & ~models.Q(role="")),
                name="groupmapping_group_or_project_role",
            ),
            models.UniqueConstraint(fields=["provider_group", "group"], name="groupmapping_unique_group"),
            models.UniqueConstraint(fields=["provider_group", "project", "role"], name="groupmapping_unique_project_role"),
        ]

    def __str__(self) -> str:
        return f"{self.provider_group} -> {self.gives()}"

    def gives(self) -> str:
        if self.group_id is not None:
            return f"group {self.group}"
        return f"{self.get_role_display()} in {self.project}"
