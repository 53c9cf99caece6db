"""Artifacts and outbox patches of an installation from before 0006 lived as files
(``HARNESS_ARTIFACT_ROOT``, ``HARNESS_OUTBOX_DIR``, by default under the var
directory), and their ``Artifact`` rows stay. A row without its bytes would be taken
for stored content, and the same output stored again would never get its bytes: so
each row's file is copied into the configured store, a row whose file is gone is
deleted (the next store of that content writes it whole), and each outbox patch
becomes the published key it was. Nothing on disk is changed."""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.files import File
from django.core.files.storage import storages
from django.db import migrations

PIECE = 1 << 18  # as runs.artifact_backends.CHUNK_BYTES when this was written
PATCH_NAME = re.compile(r"^[0-9a-f]{32}\.patch$")
RUN_LINE = re.compile(rb"^# run: (\S+)$", re.M)


def old_place(variable: str, default: str) -> Path:
    return Path(os.environ.get(variable) or Path(settings.VAR_DIR) / default)


def store(apps: Any, ref: str, path: Path, media_type: str) -> None:
    """Copy ``path`` into the store as ``ref``, its row made or kept."""
    Artifact = apps.get_model("runs", "Artifact")
    ArtifactChunk = apps.get_model("runs", "ArtifactChunk")
    hexdigest = ref.partition(":")[2]
    artifact, _ = Artifact.objects.get_or_create(ref=ref, defaults={"size": path.stat().st_size, "media_type": media_type})
    if settings.HARNESS_ARTIFACT_STORE == "s3":
        bucket = storages["artifacts"]
        name = f"{hexdigest[:2]}/{hexdigest}"
        if not bucket.exists(name):
            with open(path, "rb") as source:
                bucket.save(name, File(source))
        return
    if ArtifactChunk.objects.filter(artifact_id=ref).exists():
        return
    with open(path, "rb") as source:
        index = 0
        while block := source.read(PIECE):
            ArtifactChunk.objects.create(artifact_id=ref, index=index, data=block)
            index += 1


def from_disk(apps: Any, schema_editor: Any) -> None:
    Artifact = apps.get_model("runs", "Artifact")
    PublishedPatch = apps.get_model("runs", "PublishedPatch")
    root = old_place("HARNESS_ARTIFACT_ROOT", "artifacts")
    for artifact in list(Artifact.objects.all()):
        hexdigest = artifact.ref.partition(":")[2]
        path = root / hexdigest[:2] / hexdigest
        if path.is_file():
            store(apps, artifact.ref, path, artifact.media_type)
        else:
            artifact.delete()
    outbox = old_place("HARNESS_OUTBOX_DIR", "outbox")
    if not outbox.is_dir():
        return
    for path in sorted(outbox.iterdir()):
        if not PATCH_NAME.match(path.name) or PublishedPatch.objects.filter(key=path.stem).exists():
            continue
        content = path.read_bytes()
        ref = "sha256:" + hashlib.sha256(content).hexdigest()
        store(apps, ref, path, "text/x-diff")
        run = RUN_LINE.search(content)
        PublishedPatch.objects.create(key=path.stem, run_id=run.group(1).decode() if run else "", ref=ref, size=len(content))


class Migration(migrations.Migration):
    dependencies = [("runs", "0006_artifacts_in_the_database")]

    operations = [migrations.RunPython(from_disk, migrations.RunPython.noop)]
