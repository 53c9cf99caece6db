"""A trial's rows: the trial (one task, k repetitions, in a project), its variants
(each a named change of proposer, model settings, policy, limits or an ablation, and
who decides its requests) and its repetitions, each pointing at the ordinary run it
made. Runs know nothing of trials: the link is the repetition's (docs/design.md, Trials)."""

from __future__ import annotations

from django.conf import settings
from django.db import models


class Trial(models.Model):
    class Status(models.TextChoices):
        RUNNING = "running"
        DONE = "done"
        STOPPED = "stopped"

    project = models.ForeignKey("projects.Project", on_delete=models.PROTECT, related_name="trials")
    name = models.CharField(max_length=120)
    # The task: {"name", "contract", "acceptance"} (trials.spec.Task); the contract is
    # the one every variant starts from.
    task = models.JSONField()
    k = models.PositiveIntegerField()
    seed = models.BigIntegerField(default=0)
    # The policy the comparison judges every variant's calls against (what each call
    # needed: approval, evidence), the trial project's policy in force when it started.
    reference_policy = models.JSONField()
    suite = models.CharField(max_length=60, blank=True, default="")
    status = models.CharField(max_length=20, choices=Status.choices, default=Status.RUNNING, db_index=True)
    stop_message = models.TextField(blank=True, default="")
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)
    created_at = models.DateTimeField(auto_now_add=True)
    ended_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"trial {self.pk}: {self.name}"


class Variant(models.Model):
    trial = models.ForeignKey(Trial, on_delete=models.CASCADE, related_name="variants")
    name = models.CharField(max_length=60)
    position = models.PositiveIntegerField()
    # What the variant changes, as given (trials.spec.VariantSpec).
    spec = models.JSONField()
    # Resolved: the contract its runs get, the policy document of its project (None:
    # the trial's project's own), who decides its requests.
    contract = models.JSONField()
    policy = models.JSONField(null=True, blank=True)
    reviewer = models.JSONField()
    # Where its runs run: the trial's project, or (a variant with a policy of its own:
    # a project's policy is what its runs' gates read before every proposal) a project
    # made for it with the trial project's members, sources and limits.
    project = models.ForeignKey("projects.Project", on_delete=models.PROTECT, related_name="trial_variants")

    class Meta:
        ordering = ["trial", "position"]
        constraints = [models.UniqueConstraint(fields=["trial", "name"], name="trial_variant_unique_name")]

    def __str__(self) -> str:
        return f"{self.trial_id}/{self.name}"


class Repetition(models.Model):
    variant = models.ForeignKey(Variant, on_delete=models.CASCADE, related_name="repetitions")
    index = models.PositiveIntegerField()
    seed = models.BigIntegerField(default=0)
    run = models.OneToOneField("runs.Run", null=True, blank=True, on_delete=models.SET_NULL, related_name="trial_repetition")
    # A scripted reviewer's next decision.
    decisions_used = models.PositiveIntegerField(default=0)

    class Meta:
        ordering = ["variant", "index"]
        constraints = [models.UniqueConstraint(fields=["variant", "index"], name="trial_repetition_unique_index")]

    def __str__(self) -> str:
        return f"{self.variant}#{self.index}"
