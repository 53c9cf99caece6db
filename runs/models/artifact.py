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
