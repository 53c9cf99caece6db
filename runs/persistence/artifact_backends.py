"""Where an artifact's bytes live: in the database (the default, ``ArtifactChunk``
rows) or in an S3-compatible bucket through django-storages
(``HARNESS_ARTIFACT_STORE=s3``). Either way the ``Artifact`` row is written once the
bytes are all stored, so a row always has its content; both are written and read a
piece of ``CHUNK_BYTES`` at a time (docs/design.md, Storage)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, BinaryIO, Protocol, cast

from django.conf import settings
from django.core.files import File
from django.core.files.storage import Storage, storages
from django.db import IntegrityError, connection, transaction

from runs.models import Artifact, ArtifactChunk
from runs.persistence import rows

if TYPE_CHECKING:
    from storages.backends.s3 import S3File

# A piece: small enough that a download's read, its copy and the line being masked
# stay a few MiB together, large enough that 8 MiB of output is 32 rows.
CHUNK_BYTES = 1 << 18


def hexdigest_of(ref: str) -> str:
    algo, _, hexdigest = ref.partition(":")
    if algo != "sha256" or len(hexdigest) != 64 or not all(c in "0123456789abcdef" for c in hexdigest):
        raise ValueError(f"not an artifact reference: {ref!r}")
    return hexdigest


class ContentBackend(Protocol):
    def write(self, ref: str, source: BinaryIO, size: int, media_type: str) -> None:
        """Store the bytes ``source`` reads under ``ref``, then its ``Artifact`` row; a
        content another writer stored meanwhile is left as it is."""

    def blocks(self, ref: str) -> Iterator[bytes]:
        """The stored bytes, in order, a piece at a time."""

    def delete(self, ref: str) -> None:
        """The artifact's row and bytes."""


class DatabaseContent:
    """The bytes in ``ArtifactChunk`` rows, written in the transaction that writes the
    artifact's row: a second writer of the same content waits on the row's key and
    then finds it stored."""

    def write(self, ref: str, source: BinaryIO, size: int, media_type: str) -> None:
        with transaction.atomic():
            try:
                with transaction.atomic():
                    Artifact.objects.create(ref=ref, size=size, media_type=media_type)
            except IntegrityError:
                return
            index = 0
            while block := source.read(CHUNK_BYTES):
                # Bound on the server (runs.persistence.rows): Django's own cursor would quote the
                # piece into the statement's text, which psycopg keeps for preparing.
                with rows.checkpoint_cursor(connection) as cursor:
                    rows.insert(connection, cursor, ArtifactChunk, [{"artifact": ref, "index": index, "data": block}])
                index += 1

    def blocks(self, ref: str) -> Iterator[bytes]:
        # One query per piece, never a cursor held across them: a download's pieces
        # are read in whichever thread serves the next one (pages.run_detail).
        pieces = ArtifactChunk.objects.filter(artifact_id=ref)
        for index in range(pieces.count()):
            yield bytes(pieces.values_list("data", flat=True).get(index=index))

    def delete(self, ref: str) -> None:
        Artifact.objects.filter(ref=ref).delete()  # its chunks with it


class BucketContent:
    """The bytes as one object per content, ``<hex[:2]>/<hex>`` under the storage's
    location, uploaded from the file as it is read (multipart past boto3's threshold)
    and read back as the object's body streams."""

    def __init__(self, storage: Storage) -> None:
        self.storage = storage

    @staticmethod
    def name(ref: str) -> str:
        hexdigest = hexdigest_of(ref)
        return f"{hexdigest[:2]}/{hexdigest}"

    def write(self, ref: str, source: BinaryIO, size: int, media_type: str) -> None:
        # Same name, same bytes: a second writer's upload overwrites with what is there.
        self.storage.save(self.name(ref), File(source))
        Artifact.objects.get_or_create(ref=ref, defaults={"size": size, "media_type": media_type})

    def blocks(self, ref: str) -> Iterator[bytes]:
        # The storage's file object would download the whole object before its first
        # read; its boto3 object streams the body instead.
        with self.storage.open(self.name(ref), "rb") as stored:
            body = cast("S3File", stored).obj.get()["Body"]
            try:
                yield from body.iter_chunks(CHUNK_BYTES)
            finally:
                body.close()

    def delete(self, ref: str) -> None:
        Artifact.objects.filter(ref=ref).delete()
        self.storage.delete(self.name(ref))


def content_backend() -> ContentBackend:
    """The configured backend (``HARNESS_ARTIFACT_STORE``)."""
    if settings.HARNESS_ARTIFACT_STORE == "s3":
        return BucketContent(storages["artifacts"])
    return DatabaseContent()
