"""The one function that writes run events.

``append_events`` numbers events under the run row's lock, redacts them, stores
them and rings the run's doorbell only after the surrounding transaction commits:
live viewers read the events from the database (live.feeds), so a viewer never
sees an event the database does not have. Every write is fenced
(``core.fences``): by the lease of the worker driving the run, or by the run
row's lock for anyone else."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, NoReturn, overload

from django.db import DEFAULT_DB_ALIAS, connections, models, transaction

from common.redact import MaskedJSON, masked_each, secret_values
from core.events import Event as CoreEvent
from core.events import type_name
from core.fences import Fence, Lease
from ledger.writer import JOINED_ENTRIES, Joined, joining
from ledger.writer import batch as ledger_batch
from runs.models import Event, Run
from runs.persistence.broadcast import ring_doorbell
from runs.persistence.decisions import record_decisions
from runs.persistence.rows import (
    LAST_SEQ,
    RESERVED,
    Column,
    Rows,
    SeqOf,
    checkpoint_cursor,
    column,
    insert,
    insert_rows,
    numbered_insert,
    params_of,
    with_payloads,
)
from runs.persistence.signals import events_stored, locks_after


class LeaseLost(Exception):
    """Another worker holds the run now; this one must stop writing."""


def append_event(run_id: str, cls: type[CoreEvent], *, fence: Fence, **fields: Any) -> Event:
    """Store one event written outside the loop (a decision, a kill); its seq is
    assigned here like any other."""
    [row] = append_events(run_id, [cls(run_id=str(run_id), seq=0, ts=time.time(), **fields)], fence=fence)
    return row


def row_time(ts: float) -> datetime:
    """An event's time as its row holds it (the row's ``ts``; monitoring.spans makes a
    span from an event that was not read back with this time too)."""
    return datetime.fromtimestamp(ts, tz=UTC)


def append_events(
    run_id: str,
    events: Sequence[CoreEvent],
    *,
    fence: Fence,
    run_columns: Mapping[str, object] | None = None,
    projections: Sequence[Rows] = (),
    connection: Any = None,
    alone: bool = False,
) -> Sequence[Event]:
    """Store events for a run; returns the rows with their assigned ``seq``.

    ``run_columns`` are written to the run row in the statement that numbers the
    events, and ``fence`` decides whether that statement may write at all.
    ``projections`` are written with the events (a ``SeqOf`` in them is the seq
    its event was given, a ``PayloadOf`` that part of its payload as masked).
    ``connection``: the default database's, where the caller holds it (a checkpoint).

    ``alone``: the caller holds no transaction and writes nothing after this call (a
    checkpoint of a run that goes on: runs.persistence.store); the transaction is then a
    ``joinable`` batch of the ledger's (ledger.writer.batch). On PostgreSQL, where the
    statement that stores the events is all that transaction would hold (their decision's
    entry written by it, no listener writing after it), that statement is sent alone, its
    own transaction: a single statement commits or rolls back whole, so the events, the
    run row, the projections and the entry still land together or not at all, and
    the checkpoint costs no BEGIN, no COMMIT and none of Django's transaction
    bookkeeping (some 160,000 instructions; docs/performance-history.md, 2026-12-07)."""
    if not events and not run_columns:
        return []
    # The fence, for every writer of the log, here and nowhere else. The numbering
    # UPDATE takes the run row's lock, so every write of this run's log, whoever
    # makes it, is ordered with every other until its transaction ends. A Lease adds
    # "AND lease_token = <token>" to that UPDATE: the worker driving the run writes
    # only while the lease it claimed is still the run's, so one whose lease was taken
    # over (it stalled past the expiry, lost the database for a while) gets LeaseLost
    # and writes nothing: no checkpoint, no executor notification, no approval lapse.
    # A RowLock writer does not drive the run (a reviewer's decision, an operator's
    # kill, the beat's expiry or repair, the run's creation): what it records holds
    # whoever drives, its own conditional UPDATE (of the request, of the kill flag)
    # decides whether it writes at all, and the row lock orders it with the driver.
    lease_token = fence.token if isinstance(fence, Lease) else None
    secrets = secret_values()
    # Masked before the run row is locked: the lock is held for the statements only.
    dumped = [event.payload() for event in events]
    payloads = masked_each(dumped, secrets)
    values = Rows(
        Event,
        [
            {
                "run": run_id,
                "seq": SeqOf(index),
                "type": type_name(type(event)),
                "call_id": event.call_id,
                "ts": row_time(event.ts),
                "payload": text,
            }
            for index, (event, (_, text)) in enumerate(zip(events, payloads, strict=True))
        ],
    )
    written = [with_payloads(p, payloads) for p in projections if p.rows]
    # The connection itself, resolved once: django.db.connection looks it up again (a
    # context-local read) on every attribute, dozens of times per checkpoint.
    if connection is None:
        connection = connections[DEFAULT_DB_ALIAS]
    as_given = [value is payload for (value, _), payload in zip(payloads, dumped, strict=True)]
    ahead = _decided_ahead(connection, str(run_id), events, all(as_given), alone)
    ledger = None
    # Not where a listener may write or lock a row after the statement (runs.persistence.signals.locks_after).
    quiet = ahead is not None and not any(locks(event) for locks in locks_after for event in events)
    if ahead is not None and ahead[0].decisions and quiet:
        ledger = ahead[0].statement(f"EXISTS (SELECT FROM {RESERVED} WHERE {LAST_SEQ} = %s)", [ahead[2]])
    # Alone where its decisions' entry, if any, is the statement's own to write.
    joined = ahead is not None and (ledger is not None or not ahead[0].decisions)
    if ahead is not None and joined and quiet and alone and connection.vendor == "postgresql" and not connection.in_atomic_block:
        # The entry written, or nothing: the statement numbers the events only on the seqs
        # their decision was recorded on, and where the heads it chains on exist.
        ready = ahead[0].ready() if ledger is not None else None
        expect = (ahead[2] - len(events), *ready) if ready is not None else None
        stored, entries = _number_and_insert_at_once(connection, run_id, values, written, run_columns or {}, lease_token, ledger, expect)
        if stored:
            rows = _stored(connection, run_id, events, payloads, values, stored, entries, ahead, ledger, as_given, secrets, alone=True)
            ring_doorbell(str(run_id), stored[-1][1])
            return rows
        # Nothing written (another writer's events came between, a chain's first entry,
        # or the lease was lost): in a transaction, as ever.
    with ledger_batch(savepoint=False, joinable=True, connection=connection) if alone else _atomic(connection):
        stored, entries = _number_and_insert(connection, run_id, values, written, run_columns or {}, lease_token, ledger)
        if not stored:
            return []
        rows = _stored(connection, run_id, events, payloads, values, stored, entries, ahead, ledger, as_given, secrets, alone=False)
        last_seq = stored[-1][1]
        connection.on_commit(lambda: ring_doorbell(str(run_id), last_seq))
    return rows


def _stored(
    connection: Any,
    run_id: str,
    events: Sequence[CoreEvent],
    payloads: Sequence[tuple[Any, MaskedJSON]],
    values: Rows,
    stored: list[tuple[int, int]],
    entries: int,
    ahead: tuple[Joined, list[dict[str, Any] | None], int] | None,
    ledger: tuple[str, list[object]] | None,
    as_given: list[bool],
    secrets: list[str],
    *,
    alone: bool,
) -> StoredRows:
    """The rows just stored (``(id, seq)`` of each event: ``stored``), their decisions
    recorded and the listeners told. ``alone``: the statement has committed, and
    nothing may be recorded after it."""
    seqs = [seq for _, seq in stored]
    rows = StoredRows(
        [{"id": pk, "seq": seq, "run_id": run_id, "payload": payload} for (payload, _), (pk, seq) in zip(payloads, stored, strict=True)],
        values.rows,
    )
    # The decisions among them are the ledger's entries, in this same transaction
    # (runs.persistence.decisions): a decision not in the ledger did not happen. Its
    # digests cover the events as stored: a row masking changed is read back.
    if ahead is not None and (not ahead[0].decisions or ledger is not None and ahead[0].written(entries)):
        # None to record, or recorded on the seqs the events took.
        decisions = ahead[1]
    elif alone:
        raise RuntimeError(f"run {run_id}: the checkpoint's statement wrote {entries} ledger entries, not its decisions'")
    else:
        as_stored = [e if given else rows[n].typed() for n, (e, given) in enumerate(zip(events, as_given, strict=True))]
        decisions = record_decisions(run_id, seqs, as_stored, connection)
    # Listeners (webhook notifications) record what they need in this same
    # transaction, so it commits or rolls back with the events.
    events_stored.send(
        sender=Event, rows=rows, seqs=seqs, events=events, as_given=as_given, secrets=secrets, decisions=decisions, connection=connection
    )
    return rows


def _atomic(connection: Any) -> Any:
    """``transaction.atomic(savepoint=False)``. Inside the caller's transaction (a
    checkpoint's batch) its nested block without a savepoint, less the bookkeeping and
    the two context-local lookups of the connection that cost a checkpoint some
    30,000 instructions: what fails here fails the caller's transaction."""
    if connection.in_atomic_block:
        return _Nested(connection)
    return transaction.atomic(using=connection.alias, savepoint=False)


class _Nested:
    __slots__ = ("connection",)

    def __init__(self, connection: Any) -> None:
        self.connection = connection

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type[BaseException] | None, *rest: object) -> None:
        if kind is not None:
            # As a nested atomic block without a savepoint marks it: only a rollback of
            # the enclosing transaction (or of its savepoint) may follow.
            self.connection.needs_rollback = True


class StoredRows(Sequence[Event]):
    """The rows just written, each made a model instance when it is first asked for,
    as Django makes one it has read (Model.from_db: positional values, no keyword
    handling). Most of a checkpoint's readers want no instance (the ledger and the
    metrics take the seqs, notifications only a row they notify of), and making one
    was about 20 µs, several a step."""

    def __init__(self, stored: list[dict[str, object]], written: Sequence[Mapping[str, object]]) -> None:
        self._stored = stored  # what the database gave each row (id, seq) and its payload as given back
        self._written = written  # the rest of each row's columns as written
        self._rows: list[Event | None] = [None] * len(stored)

    def __len__(self) -> int:
        return len(self._stored)

    @overload
    def __getitem__(self, index: int) -> Event: ...

    @overload
    def __getitem__(self, index: slice) -> list[Event]: ...

    def __getitem__(self, index: int | slice) -> Event | list[Event]:
        if isinstance(index, slice):
            return [self[n] for n in range(*index.indices(len(self)))]
        row = self._rows[index]
        if row is None:
            columns = {**self._written[index], **self._stored[index]}
            row = self._rows[index] = Event.from_db(None, _EVENT_COLUMNS, [columns[name] for name in _EVENT_COLUMNS])
        return row


_EVENT_COLUMNS = [field.attname for field in Event._meta.concrete_fields]


# Each run's last seq as this process's last statement numbering its events left it:
# the seqs its next events will take, unless another writer's came between.
_last_seqs: dict[str, int] = {}


def _decided_ahead(
    connection: Any, run_id: str, events: Sequence[CoreEvent], unmasked: bool, alone: bool = False
) -> tuple[Joined, list[dict[str, Any] | None], int] | None:
    """For the PostgreSQL statement that numbers the events: the decisions among them,
    recorded ahead on the seqs they will take if no other writer's came between (the
    last seq this process left), for that statement to write (ledger.writer.joining),
    what ``record_decisions`` gave and the last seq they are decided on, which the
    statement checks; None where they are recorded once the events are stored (no seq
    known, a value masked, or not in a joinable batch)."""
    last = _last_seqs.get(run_id)
    if last is None or not events or not unmasked:
        return None
    joined = joining(connection, alone=alone)
    if joined is None:
        return None
    with joined:
        found = record_decisions(run_id, range(last + 1, last + 1 + len(events)), events, connection)
    return joined, found, last + len(events)


def _number_and_insert(
    connection: Any,
    run_id: str,
    values: Rows,
    projections: Sequence[Rows],
    columns: Mapping[str, object],
    lease_token: int | None,
    ledger: tuple[str, list[object]] | None = None,
) -> tuple[list[tuple[int, int]], int]:
    """Number the events under the run row's lock and insert them and the
    projections: ``(id, seq)`` of each event, in the order given, and how many ledger
    entries ``ledger`` (common table expressions, ledger.writer.Joined) wrote. On
    PostgreSQL that is one statement (the numbering UPDATE a common table expression
    that every INSERT selects from), one round trip per checkpoint; elsewhere the
    UPDATE, then an INSERT per table."""
    count = len(values.rows)
    if count and connection.vendor == "postgresql":
        return _number_and_insert_at_once(connection, run_id, values, projections, columns, lease_token, ledger)
    # One cursor for the checkpoint's statements: asking for the kept one costs some
    # 7,500 instructions a time (common.cursors).
    with checkpoint_cursor(connection) as cursor:
        last_seq = _reserve(connection, cursor, run_id, count, columns, lease_token)
        seqs = range(last_seq - count + 1, last_seq + 1)
        # The payloads go in as the JSON text masking already produced: each is
        # serialised once.
        resolved = [{**row, "seq": seq} for row, seq in zip(values.rows, seqs, strict=True)]
        ids = {seq: pk for pk, seq in insert(connection, cursor, Event, resolved, returning=["id", "seq"])}
        for projection in projections:
            insert_rows(connection, cursor, projection, seqs)
    return [(ids[seq], seq) for seq in seqs], 0


def _number_and_insert_at_once(
    connection: Any,
    run_id: str,
    values: Rows,
    projections: Sequence[Rows],
    columns: Mapping[str, object],
    lease_token: int | None,
    ledger: tuple[str, list[object]] | None,
    expect: tuple[int, str, list[object]] | None = None,
) -> tuple[list[tuple[int, int]], int]:
    """``expect``: the run's last seq the events must follow and a condition (SQL, its
    parameters) that must hold too, or the statement writes nothing and returns no row."""
    count = len(values.rows)
    update, fields = _reserve_statement(connection, tuple(columns), lease_token is not None, expect[1] if expect is not None else "")
    params = _reserve_params(connection, run_id, count, columns, fields, lease_token)
    if expect is not None:
        params += [expect[0], *expect[2]]
    parts = [f"{RESERVED} AS ({update})"]
    for n, projection in enumerate(projections):
        sql, more = numbered_insert(connection, projection, count)
        parts.append(f"projected_{n} AS ({sql})")
        params += more
    if ledger is not None:
        parts.append(ledger[0])
        params += ledger[1]
    sql, more = numbered_insert(connection, values, count, returning=["id", "seq"])
    params += more
    if ledger is not None:
        # Each event's row tells the entries written (the events' INSERT has no ON CONFLICT: RETURNING ends it).
        sql += f", (SELECT count(*) FROM {JOINED_ENTRIES})"  # noqa: S608 - a constant name
    with checkpoint_cursor(connection) as cursor:
        cursor.execute(f"WITH {', '.join(parts)} {sql}", params)
        stored = cursor.fetchall()
    if not stored:
        if expect is not None:
            return [], 0
        _refused(run_id, lease_token)
    # The seqs ascend in the order the events were given; RETURNING promises no order.
    seqs = sorted(row[1] for row in stored)
    ids = {row[1]: row[0] for row in stored}
    if len(_last_seqs) > 4096:
        _last_seqs.clear()
    _last_seqs[str(run_id)] = seqs[-1]
    return [(ids[seq], seq) for seq in seqs], int(stored[0][2]) if ledger is not None else 0


def _reserve(connection: Any, cursor: Any, run_id: str, count: int, columns: Mapping[str, object], lease_token: int | None) -> int:
    """Advance the run's ``last_seq`` by ``count`` and return it, in one statement.

    The UPDATE takes the run row's lock, which serialises every writer of this run's
    log (worker, reviewers, the beat) until the transaction ends, so seq stays
    gap-free and unique without retry loops; the same statement numbers the events,
    writes the caller's columns and checks the fencing token."""
    sql, fields = _reserve_statement(connection, tuple(columns), lease_token is not None)
    params = _reserve_params(connection, run_id, count, columns, fields, lease_token)
    cursor.execute(sql, params)
    found = cursor.fetchone()
    if found is None:
        _refused(run_id, lease_token)
    return int(found[0])


def _reserve_params(
    connection: Any, run_id: str, count: int, columns: Mapping[str, object], fields: list[Column], lease_token: int | None
) -> list[object]:
    params: list[object] = [count]
    params += params_of(connection, fields, columns)
    params.append(_run_key(connection).value(connection, run_id))
    if lease_token is not None:
        params.append(lease_token)
    return params


def _run_key(connection: Any) -> Column:
    """The run's key as a parameter, remembered per database: finding it again hashes
    a Django field, a Python method."""
    found = _run_keys.get(connection.vendor)
    if found is None:
        found = _run_keys[connection.vendor] = column(connection, Run._meta.pk)
    return found


_run_keys: dict[str, Column] = {}


def _refused(run_id: str, lease_token: int | None) -> NoReturn:
    """The numbering UPDATE matched no row: the lease was taken over, or no such run."""
    if lease_token is not None:
        raise LeaseLost(f"run {run_id}: lease token {lease_token} is no longer current")
    raise Run.DoesNotExist(f"run {run_id} does not exist")


_statements: dict[tuple[str, tuple[str, ...], bool, str], tuple[str, list[Column]]] = {}


def _reserve_statement(connection: Any, names: tuple[str, ...], fenced: bool, condition: str = "") -> tuple[str, list[Column]]:
    """The numbering UPDATE for these columns, built once per column set: a step
    runs it twice, and building it was a good part of its Python work. With a
    ``condition``, the run's last seq is a parameter too (after the lease token), and
    the condition's after it."""
    key = (connection.vendor, names, fenced, condition)
    found = _statements.get(key)
    if found is None:
        meta = Run._meta
        quote = connection.ops.quote_name
        fields = [_column(Run, name) for name in names]
        assignments = [f"{quote('last_seq')} = {quote('last_seq')} + %s", *(f"{quote(field.column)} = %s" for field in fields)]
        where = f"{quote(meta.pk.column)} = %s" + (f" AND {quote('lease_token')} = %s" if fenced else "")
        if condition:
            where += f" AND {quote('last_seq')} = %s AND {condition}"
        sql = f"UPDATE {quote(meta.db_table)} SET {', '.join(assignments)} WHERE {where} RETURNING {quote(LAST_SEQ)}"  # noqa: S608 - quoted identifiers; values are parameters
        found = _statements[key] = (sql, [column(connection, field) for field in fields])
    return found


def _column(model: type[models.Model], name: str) -> models.Field[Any, Any]:
    """The model's field that is a column of its table."""
    field = model._meta.get_field(name)
    if not isinstance(field, models.Field):
        raise TypeError(f"{model.__name__}.{name} is not a column")
    return field
