"""Content-addressed artifact storage: bytes on disk under ARTIFACT_ROOT, a row per
distinct content. Writing the same output twice stores it once."""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from pathlib import Path

from django.conf import settings

from runs.core.jsonutil import sha256_bytes
from runs.models import Artifact

# Readable by the (unprivileged) web server, which shows the artifacts a (root) worker
# stored: mkstemp's 0600, or a spool file's mode, would hide them from it.
ARTIFACT_MODE = 0o644


def artifact_path(ref: str) -> Path:
    algo, _, hexdigest = ref.partition(":")
    if algo != "sha256" or len(hexdigest) != 64 or not all(c in "0123456789abcdef" for c in hexdigest):
        raise ValueError(f"not an artifact reference: {ref!r}")
    return Path(settings.ARTIFACT_ROOT) / hexdigest[:2] / hexdigest


class FileArtifactStore:
    def put(self, content: bytes, media_type: str) -> str:
        ref = "sha256:" + sha256_bytes(content)
        path = artifact_path(ref)
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            # Write then rename, so a reader never sees a half-written artifact.
            fd, tmp = tempfile.mkstemp(dir=path.parent)
            os.fchmod(fd, ARTIFACT_MODE)
            with os.fdopen(fd, "wb") as handle:
                handle.write(content)
            os.replace(tmp, path)
        Artifact.objects.get_or_create(ref=ref, defaults={"size": len(content), "media_type": media_type})
        return ref

    def put_file(self, source: Path, media_type: str) -> str:
        """Store a file's content without reading it into memory (a check's 100 MB
        of output); ``source`` is consumed."""
        digest = hashlib.sha256()
        size = 0
        with open(source, "rb") as handle:
            while block := handle.read(1 << 20):
                digest.update(block)
                size += len(block)
        ref = "sha256:" + digest.hexdigest()
        path = artifact_path(ref)
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.exists():
            source.unlink()
        elif source.stat().st_dev == path.parent.stat().st_dev:
            os.replace(source, path)  # the sandbox spools under ARTIFACT_ROOT: a rename
        else:
            fd, tmp = tempfile.mkstemp(dir=path.parent)
            with os.fdopen(fd, "wb") as out, open(source, "rb") as src:
                shutil.copyfileobj(src, out, 1 << 20)
            os.replace(tmp, path)
            source.unlink()
        os.chmod(path, ARTIFACT_MODE)
        Artifact.objects.get_or_create(ref=ref, defaults={"size": size, "media_type": media_type})
        return ref

    def get(self, ref: str) -> bytes:
        return artifact_path(ref).read_bytes()
