"""The outbox: the patches published without a remote, one ``PublishedPatch`` row per
idempotency key and the patch's bytes an artifact. The row's key is the lock: any
number of workers on any hosts may publish a key at once, and the one insert that
succeeds is the publish (docs/design.md, Storage)."""

from __future__ import annotations

from django.db import IntegrityError, transaction

from runs.models import Artifact, PublishedPatch
from runs.persistence.artifacts import ArtifactStorage


class DatabaseOutbox:
    """The sandbox's ``Outbox`` port (sandbox.tools.context), handed in by runs.runtime."""

    def publish(self, key: str, run_id: str, ref: str, size: int) -> bool:
        try:
            with transaction.atomic():
                PublishedPatch.objects.create(key=key, run_id=run_id, ref=ref, size=size)
        except IntegrityError:
            return False
        return True

    def published(self, key: str) -> bool:
        return PublishedPatch.objects.filter(key=key).exists()


def published_patch(key: str) -> bytes | None:
    """The patch published under ``key``, as it was published; None if none was, or
    retention has deleted it since."""
    row = PublishedPatch.objects.filter(key=key).first()
    if row is None:
        return None
    try:
        return ArtifactStorage().get(row.ref)
    except Artifact.DoesNotExist:
        return None
