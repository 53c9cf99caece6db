from django.db import models


class Artifact(models.Model):
    """Large outputs, content-addressed: ``ref`` is ``sha256:<hex>`` of the bytes, kept
    on disk under ARTIFACT_ROOT; a second identical output is the same artifact."""

    ref = models.CharField(max_length=80, primary_key=True)
    size = models.PositiveBigIntegerField()
    media_type = models.CharField(max_length=100)
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return self.ref


class RunArtifact(models.Model):
    """The artifacts one run stored, each once, with its size: what the run's quota
    (``HARNESS_RUN_ARTIFACTS_MAX_MB``) counts. The run is named by its id, not a
    foreign key: the executor stores artifacts for runs that exist only in memory too
    (the sandbox's own tests)."""

    run_id = models.CharField(max_length=64)
    ref = models.CharField(max_length=80)
    size = models.PositiveBigIntegerField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["run_id", "ref"], name="run_artifact_once")]

    def __str__(self) -> str:
        return f"{self.run_id} {self.ref}"
