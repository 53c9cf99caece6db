from django.db import models
from django.utils import timezone


class Artifact(models.Model):
    """Large outputs, content-addressed: ``ref`` is ``sha256:<hex>`` of the bytes; a
    second identical output is the same artifact. The row exists only once its bytes
    are stored (in ``ArtifactChunk`` rows or the bucket: runs.persistence.artifact_backends), so a
    reader never finds a row without its content."""

    ref = models.CharField(max_length=80, primary_key=True)
    size = models.PositiveBigIntegerField()
    media_type = models.CharField(max_length=100)
    created_at = models.DateTimeField(auto_now_add=True)
    # Moved on by every store of the same content, so retention never deletes an
    # artifact that a run is storing again at that moment (runs.persistence.retention).
    stored_at = models.DateTimeField(default=timezone.now, db_index=True)

    def __str__(self) -> str:
        return self.ref


class ArtifactChunk(models.Model):
    """One piece of an artifact kept in the database (``HARNESS_ARTIFACT_STORE=database``):
    written and read a piece at a time, so no process holds a large output whole."""

    artifact = models.ForeignKey(Artifact, on_delete=models.CASCADE, related_name="chunks")
    index = models.PositiveIntegerField()
    data = models.BinaryField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["artifact", "index"], name="artifact_chunk_once")]

    def __str__(self) -> str:
        return f"{self.artifact_id} #{self.index}"


class RunArtifact(models.Model):
    """The artifacts one run stored, each once, with its size: what the run's quota
    (``HARNESS_RUN_ARTIFACTS_MAX_MB``) counts and retention follows. The run is named by
    its id, not a foreign key: the executor stores artifacts for runs that exist only in
    memory too (the sandbox's own tests)."""

    run_id = models.CharField(max_length=64, db_index=True)
    ref = models.CharField(max_length=80, db_index=True)
    size = models.PositiveBigIntegerField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["run_id", "ref"], name="run_artifact_once")]

    def __str__(self) -> str:
        return f"{self.run_id} {self.ref}"


class PublishedPatch(models.Model):
    """The outbox: one row per published idempotency key, inserted once, so of any
    number of publishers of a key exactly one wins (the insert), wherever they run. The
    patch's bytes are the artifact ``ref``; the row outlives them (retention), so the
    key stays taken."""

    key = models.CharField(max_length=32, primary_key=True)
    run_id = models.CharField(max_length=64, db_index=True)
    ref = models.CharField(max_length=80)
    size = models.PositiveBigIntegerField()
    created_at = models.DateTimeField(auto_now_add=True)

    @property
    def file(self) -> str:
        return f"{self.key}.patch"

    def __str__(self) -> str:
        return self.file
