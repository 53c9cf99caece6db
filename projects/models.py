"""A project, who holds which role in it, and the audit trail of changes to both.

A role is held by a user or by a Django group (an identity provider's groups map onto
groups); what each role may do is ``projects.roles.PROJECT_ROLES``."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib.auth.models import Group
from django.core.validators import MinValueValidator
from django.db import models, transaction

DEFAULT_PROJECT = "default"
# The global groups whose members are the default project's reviewers and operators:
# what an installation from before projects had, everywhere, it keeps there.
GLOBAL_ROLES = ("reviewer", "operator")


class Project(models.Model):
    slug = models.SlugField(max_length=60, unique=True)
    name = models.CharField(max_length=120)
    # What the project's runs may use, narrowing the server's allowlists (never
    # widening them): workspace source names under the server's roots and git remote
    # URL prefixes. Empty: everything the server allows.
    workspace_sources = models.JSONField(default=list, blank=True)
    git_remotes = models.JSONField(default=list, blank=True)
    # Runs active at once (more wait in the project's queue, first in first out); null: no cap.
    max_active_runs = models.PositiveIntegerField(null=True, blank=True)
    # The slots taken: the project's runs admitted and not ended (runs.project_queue claims
    # one with a conditional UPDATE of this column, and the run's end gives it back).
    active_runs = models.PositiveIntegerField(default=0, editable=False)
    # The most a run of the project may ask for, by limit name (core.contract.LIMIT_NAMES,
    # e.g. {"wall_time_seconds": 600}), within the policy's budget; empty: the policy's alone.
    run_limits = models.JSONField(default=dict, blank=True)
    # Model budgets per UTC day and month, over the project's runs started in that day or
    # month (runs.budgets); null: no project limit on that side.
    daily_max_tokens = models.PositiveBigIntegerField(null=True, blank=True)
    monthly_max_tokens = models.PositiveBigIntegerField(null=True, blank=True)
    daily_max_cost_usd = models.FloatField(null=True, blank=True)
    monthly_max_cost_usd = models.FloatField(null=True, blank=True)
    # Of what a run may use of those budgets, the part kept back for verification and
    # its report: once the rest is used, the model may only run checks and finish.
    reserve_tokens = models.PositiveBigIntegerField(default=0)
    reserve_cost_usd = models.FloatField(default=0.0, validators=[MinValueValidator(0.0)])
    # The project's switch: no new run starts while it is paused.
    paused = models.BooleanField(default=False)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["slug"]

    def __str__(self) -> str:
        return self.slug

    def save(self, *args: Any, **kwargs: Any) -> None:
        # ``active_runs`` is written only by the conditional UPDATEs that claim and give
        # back slots: a project saved from an object read earlier (the admin's form)
        # would otherwise write back the count it read, losing the claims since.
        if self.pk is not None and not self._state.adding and kwargs.get("update_fields") is None:
            kwargs["update_fields"] = [f.name for f in self._meta.concrete_fields if not f.primary_key and f.name != "active_runs"]
        super().save(*args, **kwargs)


def ensure_default_project(**_: object) -> Project:
    """The default project, with the global groups' roles in it: after every migrate and
    flush (as runs.roles does for the groups), so a fresh database always has it."""
    # The audit, and with it the decision ledger, sits on these rows (projects.audit).
    from projects.audit import record

    project, _created = Project.objects.get_or_create(slug=DEFAULT_PROJECT, defaults={"name": "Default"})
    for role in GLOBAL_ROLES:
        group, _created = Group.objects.get_or_create(name=role)
        with transaction.atomic():
            _membership, created = Membership.objects.get_or_create(project=project, group=group, role=role)
            if created:
                # Every change of membership is audited and in the ledger, the server's own too.
                record(project, None, "membership_added", group=role, role=role)
    return project


def default_project_id() -> int:
    """Where a run goes when nobody names a project."""
    return ensure_default_project().pk


class Role(models.TextChoices):
    REVIEWER = "reviewer"
    OPERATOR = "operator"
    ADMIN = "admin", "project admin"


class Membership(models.Model):
    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="memberships")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.CASCADE, related_name="memberships")
    group = models.ForeignKey(Group, null=True, blank=True, on_delete=models.CASCADE, related_name="memberships")
    role = models.CharField(max_length=20, choices=Role.choices)
    # Given at sign-in by an admin's mapping of a provider group onto this role
    # (signin.GroupMapping): a later sign-in without that group takes it away, and one
    # the provider refuses too. A role given in person is never touched by a sign-in.
    via_provider = models.BooleanField(default=False, editable=False, help_text="given at sign-in by a provider group's mapping")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=models.Q(user__isnull=False, group__isnull=True) | models.Q(user__isnull=True, group__isnull=False),
                name="membership_user_or_group",
            ),
            models.UniqueConstraint(fields=["project", "user", "role"], name="membership_unique_user_role"),
            models.UniqueConstraint(fields=["project", "group", "role"], name="membership_unique_group_role"),
        ]

    def __str__(self) -> str:
        holder = f"user {self.user_id}" if self.user_id is not None else f"group {self.group_id}"
        return f"{holder}: {self.role} of project {self.project_id}"


class AuditEntry(models.Model):
    """Who changed what in a project (membership, policy, budget, token, switch), and when."""

    project = models.ForeignKey(Project, null=True, blank=True, on_delete=models.SET_NULL, related_name="audit")
    actor = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)
    action = models.CharField(max_length=60)
    detail = models.JSONField(default=dict)
    at = models.DateTimeField(auto_now_add=True, db_index=True)

    class Meta:
        ordering = ["-at"]

    def __str__(self) -> str:
        return f"{self.action} by {self.actor_id} at {self.at:%Y-%m-%d %H:%M}"


class McpServer(models.Model):
    """A Model Context Protocol server whose tools a project's runs may be allowed
        (docs/design.md, Outside tools). Configured by site admins alone, never by a contract
        or a model: where the server is (a URL on HARNESS_MCP_ALLOWED_URLS, reached from
        the worker), the name of the worker's environment variable holding its bearer
        token (the token itself is stored nowhere); or, for a server over stdio, the command
    that runs it inside each run's sandbox container; the argument Harness fills with an
        effect's idempotency key and the tool that looks an effect up by that key."""

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="mcp_servers")
    name = models.SlugField(
        max_length=40,
        help_text=(
            # Plain words: the admin shows help texts as HTML, where "<name>" would vanish as a tag.
            "1 to 40 lowercase letters, digits, '_' or '-', starting with a letter. Its tools are named after it: a server named"
            " 'github' offers its tool 'search' as 'github.search'."
        ),
    )
    url = models.URLField(
        max_length=500,
        blank=True,
        help_text="Its streamable HTTP endpoint; must be on HARNESS_MCP_ALLOWED_URLS. Empty for a server over stdio.",
    )
    # A server over stdio runs in each run's sandbox container, as the sandbox user,
    # without network: its argv, e.g. ["/opt/harness-mcp/bin/workspace-search"].
    command = models.JSONField(
        default=list, blank=True, help_text="For a server over stdio in the run's sandbox: its command as a JSON list of strings."
    )
    credential_env = models.CharField(
        max_length=100,
        blank=True,
        help_text="The worker's environment variable that holds the server's bearer token (its name, never the token).",
    )
    idempotency_arg = models.CharField(
        max_length=64, blank=True, help_text="The tool argument Harness sets to an effect's idempotency key; hidden from the model."
    )
    lookup_tool = models.CharField(
        max_length=64,
        blank=True,
        help_text="The server's tool that answers {found: true|false} for an idempotency key: how an effect of unknown outcome is looked up.",
    )
    timeout_seconds = models.PositiveIntegerField(default=30, help_text="How long one call may wait for the server's answer.")
    max_response_mb = models.PositiveIntegerField(default=8, help_text="The most one answer may hold; more is cut off and refused.")
    enabled = models.BooleanField(default=True)

    class Meta:
        ordering = ["project", "name"]
        verbose_name = "MCP server"
        constraints = [models.UniqueConstraint(fields=["project", "name"], name="mcp_server_name_per_project")]

    def __str__(self) -> str:
        return f"{self.name} ({self.project_id})"


def mcp_server_names(project_id: int) -> set[str]:
    return set(McpServer.objects.filter(project_id=project_id, enabled=True).values_list("name", flat=True))
