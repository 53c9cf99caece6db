"""The ledger out of the database: the export's lines (ledger.verify reads them), the
check of the stored chain ("verify now"), the head as published, and the retention
of what deciders were shown (docs/design.md, Decision ledger)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.utils import timezone

from ledger.models import GLOBAL_CHAIN, Content, Entry, Head, project_chain
from ledger.verify import Head as PublishedHead
from ledger.verify import Problem, verify
from ledger.writer import exported

CHUNK = 1000

# What rebuilds the content entries' ``shown`` covers from the rows that recorded
# their decisions (runs.persistence.decisions.shown_contents, registered by the runs
# app): entries -> {seq: content}. Content the ledger itself keeps comes first.
rebuilders: list[Callable[[Sequence[Entry]], Mapping[int, str]]] = []


def lines(project: int | None = None) -> Iterator[dict[str, Any]]:
    """Every entry in the global chain's order, each with the content its ``shown``
    digest covers where retention kept it; with ``project``, that project's entries
    alone, in its chain's order."""
    last = 0
    while True:
        if project is None:
            chunk = list(Entry.objects.filter(seq__gt=last).order_by("seq")[:CHUNK])
        else:
            chunk = list(Entry.objects.filter(project_id=project, project_seq__gt=last).order_by("project_seq")[:CHUNK])
        if not chunk:
            return
        kept = dict(Content.objects.filter(digest__in={entry.shown for entry in chunk}).values_list("digest", "body"))
        rebuilt: dict[int, str] = {}
        missing = [entry for entry in chunk if entry.shown not in kept]
        for rebuild in rebuilders if missing else ():
            rebuilt.update(rebuild(missing))
        for entry in chunk:
            yield exported(entry, kept.get(entry.shown, rebuilt.get(entry.seq)))
        last = int(chunk[-1].seq if project is None else chunk[-1].project_seq or 0)


def write_export(out: Any, project: int | None = None) -> int:
    """The export as JSON Lines into ``out`` (a text stream), of every entry or of one
    project's chain; how many entries."""
    count = 0
    for line in lines(project):
        out.write(json.dumps(line, ensure_ascii=False, sort_keys=True) + "\n")
        count += 1
    return count


def head(project: int | None = None) -> dict[str, Any]:
    """The global chain's head as the beat publishes it (or a project's)."""
    chain = GLOBAL_CHAIN if project is None else project_chain(project)
    row = Head.objects.filter(chain=chain).first()
    return {
        "chain": chain,
        "seq": row.seq if row is not None else 0,
        "digest": row.digest if row is not None else "",
        "at": timezone.now().isoformat(),
    }


def verify_stored() -> Problem | None:
    """The stored chain checked as an export of it would be, against its own head row
    (which finds an entry removed from the end)."""
    published = head()
    return verify(list(lines()), PublishedHead(published["digest"], published["seq"]) if published["seq"] else None)


def forget_shown_content() -> int:
    """What deciders were shown, once no entry newer than the retention names it: the
    entries and their digests stay, so the chain still verifies; an export then holds
    the digest of what was shown, no longer the content. Returns how many were forgotten."""
    days = int(settings.HARNESS_LEDGER_CONTENT_RETENTION_DAYS)
    if days <= 0:
        return 0
    cutoff = timezone.now() - timedelta(days=days)
    recent = Entry.objects.filter(at__gte=cutoff).values("shown")
    deleted, _ = Content.objects.filter(kept_at__lt=cutoff).exclude(digest__in=recent).delete()
    return deleted
