"""Content-addressed artifact storage: a row per distinct content, its bytes in the
configured backend (the database, or an S3-compatible bucket: runs.persistence.artifact_backends).
Writing the same output twice stores it once. A store given a run also records what
that run stored (``RunArtifact``), which its quota counts and retention follows.

Artifacts are read back in bounded pieces, never whole: ``masked_chunks`` masks them
a line at a time for the pages and downloads (docs/design.md, Trust boundaries)."""

from __future__ import annotations

import hashlib
import io
from collections import deque
from collections.abc import Callable, Generator, Iterable, Iterator
from pathlib import Path
from typing import BinaryIO

from django.db.models import Sum
from django.utils import timezone

from common.redact import redact_lines, redact_text, secret_values
from common.secret_detector import hits
from core.jsonutil import sha256_bytes
from runs.models import Artifact, RunArtifact
from runs.persistence.artifact_backends import ContentBackend, content_backend, hexdigest_of

READ_BYTES = 1 << 16
# Masking holds one line at a time. Every credential pattern and configured secret is
# matched within a line, so masking whole lines masks exactly what masking the whole
# file would; a line longer than this is cut where no secret crosses (``_seam``).
MASK_LINE_BYTES = 1 << 20
# Around a cut in an overlong line, masking the two sides apart must give what masking
# them together does over this many bytes each side: a secret up to this long that
# crosses the cut is seen. Cuts are tried this many bytes apart, going back.
SEAM_BYTES = 8192
SEAM_STEP = 512


class ArtifactStorage:
    """``run_id`` names the run whose artifacts these are (the executor's and the
    loop's store); without one (the pages, which only read) nothing is counted."""

    def __init__(self, run_id: str | None = None, backend: ContentBackend | None = None) -> None:
        self.run_id = run_id
        self.backend = backend or content_backend()

    def put(self, content: bytes, media_type: str) -> str:
        ref = "sha256:" + sha256_bytes(content)
        self._store(ref, len(content), media_type, lambda: io.BytesIO(content))
        return ref

    def put_file(self, source: Path, media_type: str) -> str:
        """Store a file's content without reading it into memory (a check's output
        spooled on the worker); ``source`` is consumed."""
        digest = hashlib.sha256()
        size = 0
        with open(source, "rb") as handle:
            while block := handle.read(1 << 20):
                digest.update(block)
                size += len(block)
        ref = "sha256:" + digest.hexdigest()
        try:
            self._store(ref, size, media_type, lambda: open(source, "rb"))  # noqa: SIM115 - _store closes what it opens
        finally:
            source.unlink()
        return ref

    def _store(self, ref: str, size: int, media_type: str, opener: Callable[[], BinaryIO]) -> None:
        # Stored already: only marked as stored again, which keeps it from retention.
        if not Artifact.objects.filter(ref=ref).update(stored_at=timezone.now()):
            with opener() as source:
                self.backend.write(ref, source, size, media_type)
        if self.run_id is not None:
            # Once per run and content: the backend holds it once however often it is stored.
            RunArtifact.objects.get_or_create(run_id=self.run_id, ref=ref, defaults={"size": size})

    def stored_bytes(self) -> int:
        """What this run's artifacts hold (0 for a store given no run)."""
        if self.run_id is None:
            return 0
        total = RunArtifact.objects.filter(run_id=self.run_id).aggregate(total=Sum("size"))["total"]
        return int(total or 0)

    def blocks(self, ref: str) -> Iterator[bytes]:
        """The artifact's bytes a piece at a time; ``Artifact.DoesNotExist`` for one
        not stored (or deleted by retention)."""
        hexdigest_of(ref)
        if not Artifact.objects.filter(ref=ref).exists():
            raise Artifact.DoesNotExist(ref)
        return self.backend.blocks(ref)

    def get(self, ref: str) -> bytes:
        return b"".join(self.blocks(ref))


def masked_chunks(ref: str) -> Generator[bytes, None, None]:
    """The stored artifact's bytes with secrets masked (``masked_blocks``)."""
    return masked_blocks(ArtifactStorage().blocks(ref))


def masked_blocks(blocks: Iterable[bytes]) -> Generator[bytes, None, None]:
    """Bytes read a block at a time, with secrets masked, in pieces of about
    ``READ_BYTES`` (whole lines), holding at most ``MASK_LINE_BYTES`` and a block in
    memory. Lines go through one ``redact_lines``, so a private key is followed from
    line to line across blocks, as masking the whole file would."""
    secrets = line_secrets()
    ends: deque[str] = deque()

    def texts() -> Iterator[str]:
        for text, end in _pieces(blocks, secrets):
            ends.append(end)
            yield text

    out: list[str] = []
    size = 0
    for masked in redact_lines(texts(), secrets):
        out.append(masked + ends.popleft())
        size += len(out[-1])
        if size >= READ_BYTES:
            yield "".join(out).encode("utf-8", "surrogateescape")
            out, size = [], 0
    if out:
        yield "".join(out).encode("utf-8", "surrogateescape")


def _pieces(blocks: Iterable[bytes], secrets: list[str]) -> Iterator[tuple[str, str]]:
    """The lines (text, "\\n"), and an overlong line in pieces (text, "") cut where no
    secret crosses (``_seam``)."""
    pending = b""
    for block in blocks:
        pending += block
        start = 0
        while (cut := pending.find(b"\n", start)) >= 0:
            yield pending[start:cut].decode("utf-8", "surrogateescape"), "\n"
            start = cut + 1
        pending = pending[start:]
        while len(pending) >= MASK_LINE_BYTES + SEAM_BYTES:
            cut = _seam(pending, MASK_LINE_BYTES, secrets)
            yield pending[:cut].decode("utf-8", "surrogateescape"), ""
            pending = pending[cut:]
    if pending:
        yield pending.decode("utf-8", "surrogateescape"), ""


def line_secrets() -> list[str]:
    """The configured secret values as masking within a line sees them: a value of
    several lines (a key in an environment variable) is masked line by line, so each
    of its lines long enough to be masked at all is looked for on its own."""
    lines = {line for value in secret_values() for line in value.splitlines()}
    return sorted((line for line in lines if len(line) >= 8), key=len, reverse=True)


def _mask(piece: bytes, secrets: list[str]) -> bytes:
    """A piece of one line masked (the shapes and configured values, which never
    reach past a line)."""
    return redact_text(piece.decode("utf-8", "surrogateescape"), secrets).encode("utf-8", "surrogateescape")


def _seam(line: bytes, at: int, secrets: list[str]) -> int:
    """Where to cut an overlong line near ``at``: the first point going back where
    masking each side apart equals masking the two together around the point, so no
    secret shorter than ``SEAM_BYTES`` crosses it. Bytes of a multi-byte character
    are never separated (a cut at a continuation byte moves back)."""
    for cut in _cuts(line, at, secrets):
        while cut > 0 and line[cut] & 0xC0 == 0x80:
            cut -= 1
        if cut == 0:
            continue
        left, right = line[max(0, cut - SEAM_BYTES) : cut], line[cut : cut + SEAM_BYTES]
        if _mask(left, secrets) + _mask(right, secrets) == _mask(left + right, secrets):
            return cut
    # A credential-shaped run of token characters longer than the seam: cut where
    # asked; its first part is masked, as every shorter secret is.
    return at


def _cuts(line: bytes, at: int, secrets: list[str]) -> Iterator[int]:
    """The points a cut near ``at`` may try, going back: every ``SEAM_STEP`` bytes,
    then the edges of every secret and credential shape around ``at`` (in a line of
    secrets back to back, no other point will do, and a step may miss them all)."""
    low = max(0, at - SEAM_BYTES)
    yield from range(at, low, -SEAM_STEP)
    window = line[low : at + SEAM_BYTES].decode("utf-8", "surrogateescape")
    edges: set[int] = set()
    for secret in secrets:
        start = window.find(secret)
        while start >= 0:
            edges.update((start, start + len(secret)))
            start = window.find(secret, start + 1)
    edges.update(edge for hit in hits(window) for edge in (hit.start, hit.end))
    for edge in sorted(edges, reverse=True):
        cut = low + len(window[:edge].encode("utf-8", "surrogateescape"))
        if low < cut <= at:
            yield cut
