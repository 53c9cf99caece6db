"""The one function that writes run events.

``append_events`` numbers events under the run row's lock, redacts them, stores
them and broadcasts them only after the surrounding transaction commits, so a
viewer never sees an event the database does not have."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from django.db import DEFAULT_DB_ALIAS, connections, transaction

from common.redact import masked, secret_values
from runs.broadcast import broadcast_events
from runs.core.events import Event as CoreEvent
from runs.models import Event, Run
from runs.rows import checkpoint_cursor, insert
from runs.signals import events_stored


class LeaseLost(Exception):
    """Another worker holds the run now; this one must stop writing."""


def append_event(run_id: str, cls: type[CoreEvent], **fields: Any) -> Event:
    """Store one event written outside the loop (a decision, a kill); its seq is
    assigned here like any other."""
    [row] = append_events(run_id, [cls(run_id=str(run_id), seq=0, ts=time.time(), **fields)])
    return row


def append_events(
    run_id: str,
    events: Sequence[CoreEvent],
    *,
    run_columns: Mapping[str, object] | None = None,
    lease_token: int | None = None,
) -> list[Event]:
    """Store events for a run; returns the rows with their assigned ``seq``.

    ``run_columns`` are written to the run row in the statement that numbers the
    events, and ``lease_token`` fences that statement: a worker whose lease was
    taken over gets ``LeaseLost`` and writes nothing."""
    if not events and not run_columns:
        return []
    secrets = secret_values()
    with transaction.atomic(savepoint=False):
        last_seq = _reserve(run_id, len(events), run_columns or {}, lease_token)
        first = last_seq - len(events) + 1
        rows = []
        texts = []
        for offset, event in enumerate(events):
            payload, text = masked(event.payload(), secrets)
            rows.append(
                Event(
                    run_id=run_id,
                    seq=first + offset,
                    type=event.type,
                    call_id=event.call_id,
                    ts=datetime.fromtimestamp(event.ts, tz=UTC),
                    payload=payload,
                )
            )
            texts.append(text)
        if not rows:
            return rows
        # The payloads go in as the JSON text masking already produced: each is
        # serialised once.
        stored = insert(
            Event,
            [
                {"run": run_id, "seq": r.seq, "type": r.type, "call_id": r.call_id, "ts": r.ts, "payload": text}
                for r, text in zip(rows, texts, strict=True)
            ],
            returning=["id", "seq"],
        )
        ids = {seq: pk for pk, seq in stored}
        for row in rows:
            row.pk = ids[row.seq]
            row._state.adding = False
        # Listeners (webhook notifications) record what they need in this same
        # transaction, so it commits or rolls back with the events.
        events_stored.send(sender=Event, rows=rows)
        payloads = [row.as_dict() for row in rows]
        transaction.on_commit(lambda: broadcast_events(str(run_id), payloads))
    return rows


def _reserve(run_id: str, count: int, columns: Mapping[str, object], lease_token: int | None) -> int:
    """Advance the run's ``last_seq`` by ``count`` and return it, in one statement.

    The UPDATE takes the run row's lock, which serialises every writer of this run's
    log (worker, reviewers, the beat) until the transaction ends, so seq stays
    gap-free and unique without retry loops; the same statement numbers the events,
    writes the caller's columns and checks the fencing token."""
    connection = connections[DEFAULT_DB_ALIAS]  # resolved once (see runs.rows.insert)
    meta = Run._meta
    sql, fields = _reserve_statement(connection, tuple(columns), lease_token is not None)
    params: list[object] = [count]
    params += [field.get_db_prep_save(columns[field.name], connection) for field in fields]
    params.append(meta.pk.get_db_prep_value(run_id, connection))
    if lease_token is not None:
        params.append(lease_token)
    with checkpoint_cursor(connection) as cursor:
        cursor.execute(sql, params)
        found = cursor.fetchone()
    if found is None:
        if lease_token is not None:
            raise LeaseLost(f"run {run_id}: lease token {lease_token} is no longer current")
        raise Run.DoesNotExist(f"run {run_id} does not exist")
    return int(found[0])


_statements: dict[tuple[str, tuple[str, ...], bool], tuple[str, list[Any]]] = {}


def _reserve_statement(connection: Any, names: tuple[str, ...], fenced: bool) -> tuple[str, list[Any]]:
    """The numbering UPDATE for these columns, built once per column set: a step
    runs it twice, and building it was a good part of its Python work."""
    key = (connection.vendor, names, fenced)
    found = _statements.get(key)
    if found is None:
        meta = Run._meta
        quote = connection.ops.quote_name
        fields = [meta.get_field(name) for name in names]
        assignments = [f"{quote('last_seq')} = {quote('last_seq')} + %s", *(f"{quote(field.column)} = %s" for field in fields)]
        where = f"{quote(meta.pk.column)} = %s" + (f" AND {quote('lease_token')} = %s" if fenced else "")
        sql = f"UPDATE {quote(meta.db_table)} SET {', '.join(assignments)} WHERE {where} RETURNING {quote('last_seq')}"  # noqa: S608 - quoted identifiers; values are parameters
        found = _statements[key] = (sql, fields)
    return found
