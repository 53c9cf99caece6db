"""Retention: the artifacts of runs that ended ``HARNESS_ARTIFACT_RETENTION_DAYS`` ago
are deleted, rows and bytes. An artifact is shared by content, so it goes only once no
run's record names it any more (a newer run that stored the same bytes keeps it) and
nobody stored it again since the cut-off. The outbox keeps its rows: a published key
stays taken after its patch is gone."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db import transaction
from django.db.models import Exists, OuterRef

from runs.models import Artifact, Run, RunArtifact
from runs.persistence.artifact_backends import ContentBackend, content_backend

BATCH = 500


@dataclass(frozen=True)
class Deleted:
    runs: int
    artifacts: int


def delete_expired_artifacts(days: int, now: datetime, backend: ContentBackend | None = None) -> Deleted:
    """Forget what runs that ended before ``now - days`` stored, then delete every
    artifact no run names and none stored since then. ``days`` 0 deletes nothing."""
    if days <= 0:
        return Deleted(0, 0)
    backend = backend or content_backend()
    cutoff = now - timedelta(days=days)
    # RunArtifact names its run by its id as text (some are no run's: the sandbox's
    # own tests), so the runs are looked up by the ids it holds, not joined.
    holders = sorted({run_id for run_id in RunArtifact.objects.values_list("run_id", flat=True).distinct() if _is_uuid(run_id)})
    run_ids: list[str] = []
    for start in range(0, len(holders), BATCH):
        batch = holders[start : start + BATCH]
        ended = Run.objects.filter(pk__in=batch, status__in=(Run.Status.COMPLETE, Run.Status.STOPPED), updated_at__lt=cutoff)
        expired = [str(pk) for pk in ended.values_list("pk", flat=True)]
        RunArtifact.objects.filter(run_id__in=expired).delete()
        run_ids += expired
    unnamed = Artifact.objects.filter(stored_at__lt=cutoff).filter(~Exists(RunArtifact.objects.filter(ref=OuterRef("ref"))))
    deleted = 0
    for ref in list(unnamed.values_list("ref", flat=True)):
        # Decided again under the row's lock, bytes deleted before it is released: a
        # run storing the same content meanwhile either moved stored_at on first (kept)
        # or waits for the lock, finds no row and stores the bytes anew.
        with transaction.atomic():
            if unnamed.select_for_update().filter(ref=ref).values_list("ref", flat=True).first() is not None:
                backend.delete(ref)
                deleted += 1
    return Deleted(len(run_ids), deleted)


def _is_uuid(text: str) -> bool:
    try:
        uuid.UUID(text)
    except ValueError:
        return False
    return True
