"""A run's artifacts as the pages and the API deliver them: only those the run's
records name, masked and streamed a piece at a time from the store (runs.persistence.artifacts),
never from a worker's disk."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

from asgiref.sync import sync_to_async
from django.core.handlers.asgi import ASGIRequest
from django.http import HttpRequest, StreamingHttpResponse

from live.trace import artifact_refs
from runs.models import Evidence, Receipt, Run
from runs.persistence.artifacts import masked_chunks


def run_has_artifact(run: Run, ref: str) -> bool:
    """Artifacts are shared by content, so a reference is only served in the context
    of a run whose receipts or evidence name it."""
    if Evidence.objects.filter(run=run, output_ref=ref).exists():
        return True
    return any(ref in artifact_refs(body) for body in Receipt.objects.filter(run=run).values_list("body", flat=True))


def stream_masked(request: HttpRequest, ref: str) -> StreamingHttpResponse:
    """The artifact masked, as a download streamed a piece at a time. Under ASGI (the
    server's Daphne) the pieces must come from an asynchronous iterator: Django reads a
    synchronous one whole into a list before it sends a byte."""
    chunks = masked_chunks(ref)
    content: Iterator[bytes] | AsyncIterator[bytes] = chunks
    if isinstance(request, ASGIRequest):
        content = _each_in_a_thread(chunks)
    response = StreamingHttpResponse(content, content_type="application/octet-stream")
    response["Content-Disposition"] = f'attachment; filename="{ref[7:]}"'
    return response


async def _each_in_a_thread(chunks: Iterator[bytes]) -> AsyncIterator[bytes]:
    # Reading and masking block: each piece is made in a worker thread, and the next
    # is asked for only once this one is sent.
    step = sync_to_async(_next_or_none, thread_sensitive=False)
    while (chunk := await step(chunks)) is not None:
        yield chunk


def _next_or_none(chunks: Iterator[bytes]) -> bytes | None:
    return next(chunks, None)
