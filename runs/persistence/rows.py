"""Writing many rows in one statement, for the checkpoint's hot path.

``insert`` sends one multi-row INSERT (an upsert when given the unique fields and
the fields to update) built straight from the model's fields. It is the statement
``bulk_create`` sends, with a fraction of the Python work per call, which matters
when a durable step is a handful of such statements.

A checkpoint's rows are ``Rows``: on PostgreSQL ``numbered_insert`` writes them in
the statement that numbers the checkpoint's events, taking each ``SeqOf`` from the
row the numbering UPDATE returned; elsewhere ``insert_rows`` writes them once the
seqs are known."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from django.db import models
from django.db.backends.base.operations import BaseDatabaseOperations
from django.db.models.options import Options

from common.cursors import checkpoint_cursor
from common.redact import MaskedJSON, RedactedJSONField, RedactedTextField, as_written, masked_part

__all__ = [
    "LAST_SEQ",
    "RESERVED",
    "Column",
    "PayloadOf",
    "Rows",
    "SeqOf",
    "checkpoint_cursor",
    "column",
    "db_value",
    "insert",
    "insert_rows",
    "numbered_insert",
    "params_of",
    "with_payloads",
]


def insert(
    connection: Any,
    cursor: Any,
    model: type[models.Model],
    rows: Sequence[Mapping[str, object]],
    *,
    unique: Sequence[str] = (),
    update: Sequence[str] = (),
    returning: Sequence[str] = (),
) -> list[tuple[Any, ...]]:
    """Insert ``rows`` (field name -> value, the same fields in each) through
    ``cursor`` (``checkpoint_cursor``'s), one statement per batch the database
    accepts. With ``unique``, a row that collides on those
    fields updates ``update`` instead. Returns the ``returning`` columns of the rows
    written, in no particular order."""
    if not rows:
        return []
    head, tail, placeholders, columns = _statement(connection, model, tuple(rows[0]), tuple(unique), tuple(update), tuple(returning))
    # One row is one statement whatever the batch size; the backend's size (on SQLite
    # a walk over the fields, on every insert) is asked for several only.
    batch = len(rows) if len(rows) == 1 else connection.ops.bulk_batch_size([c.field for c in columns], rows) or len(rows)
    written: list[tuple[Any, ...]] = []
    for start in range(0, len(rows), batch):
        chunk = rows[start : start + batch]
        params = [
            v if v is None or type(v) is c.kind else c.convert(connection, v) for row in chunk for c in columns for v in [row[c.name]]
        ]
        cursor.execute(head + ", ".join([placeholders] * len(chunk)) + tail, params)
        if returning:
            written += cursor.fetchall()
    return written


@dataclass(frozen=True)
class SeqOf:
    """Stands for the seq of the checkpoint's event at ``index``: a row that names its
    event (the event itself, a receipt) is written before the seqs are known."""

    index: int


@dataclass(frozen=True)
class PayloadOf:
    """Stands for field ``name`` of the payload of the checkpoint's event at ``index``,
    as masking gave it (``common.redact.masked_part``): a row that copies part of its
    event (a receipt's body) is masked with the events' payloads, not scanned again."""

    index: int
    name: str


@dataclass(frozen=True)
class Rows:
    """One table's rows for a checkpoint (the same fields in each); with ``unique``, a
    row that collides on those fields updates ``update`` instead."""

    model: type[models.Model]
    rows: Sequence[Mapping[str, object]]
    unique: tuple[str, ...] = ()
    update: tuple[str, ...] = ()


def with_payloads(rows: Rows, payloads: Sequence[tuple[Any, MaskedJSON]]) -> Rows:
    """``rows`` with each ``PayloadOf`` replaced by that part of its event's masked
    payload (``payloads``: ``masked_each``'s)."""
    if not rows.rows or not any(type(value) is PayloadOf for value in rows.rows[0].values()):
        return rows
    resolved = [
        {name: masked_part(payloads[value.index][0][value.name]) if type(value) is PayloadOf else value for name, value in row.items()}
        for row in rows.rows
    ]
    return Rows(rows.model, resolved, rows.unique, rows.update)


def insert_rows(connection: Any, cursor: Any, rows: Rows, seqs: Sequence[int]) -> None:
    """``rows`` written through ``cursor`` with each ``SeqOf`` replaced by its seq."""
    resolved = [{name: seqs[value.index] if isinstance(value, SeqOf) else value for name, value in row.items()} for row in rows.rows]
    insert(connection, cursor, rows.model, resolved, unique=rows.unique, update=rows.update)


# The numbering UPDATE's common table expression and the column it returns.
RESERVED = "reserved"
LAST_SEQ = "last_seq"


def numbered_insert(connection: Any, rows: Rows, count: int, returning: Sequence[str] = ()) -> tuple[str, list[object]]:
    """An INSERT of ``rows`` for a statement whose ``reserved`` CTE returned the
    ``last_seq`` of ``count`` events just numbered: a ``SeqOf(i)`` becomes that seq less
    ``count - 1 - i``. Selecting from ``reserved`` also means that when the numbering
    UPDATE matched no row (a lease taken over) nothing is written. Every value is cast
    to its column's type: in VALUES under a SELECT the server would otherwise take a
    string for text, which no JSON, uuid or time column accepts."""
    first = rows.rows[0]
    numbered = tuple(name for name, value in first.items() if isinstance(value, SeqOf))
    head, tail, row_sql, columns = _statement(connection, rows.model, tuple(first), rows.unique, rows.update, tuple(returning), numbered)
    # Inline (as params_of): a method call per value was a good part of building them.
    params = [
        count - 1 - v.index if type(v) is SeqOf else v if v is None or type(v) is c.kind else c.convert(connection, v)
        for row in rows.rows
        for c in columns
        for v in [row[c.name]]
    ]
    return head + ", ".join([row_sql] * len(rows.rows)) + tail, params


def _conflict_and_returning(
    quote: Any, meta: Options[Any], unique: tuple[str, ...], update: tuple[str, ...], returning: tuple[str, ...]
) -> str:
    tail = ""
    if unique:
        targets = ", ".join(quote(_column(meta, name).column) for name in unique)
        changes = ", ".join(f"{column} = excluded.{column}" for column in (quote(_column(meta, name).column) for name in update))
        tail += f" ON CONFLICT ({targets}) DO UPDATE SET {changes}"
    if returning:
        tail += " RETURNING " + ", ".join(quote(_column(meta, name).column) for name in returning)
    return tail


def db_value(connection: Any, field: models.Field[Any, Any], value: object) -> object:
    """``field.get_db_prep_save(value, connection)``, without its dozen calls where
    the answer is known to be the value itself (a string for a plain text column, a
    flag for a boolean, an integer where the backend passes integers through): a
    checkpoint converts some fifty values, and the conversions were an eighth of a
    SQLite step's time. A uuid key's conversion is remembered (a checkpoint names
    the same run in every row). The statements a checkpoint sends look each
    field's way up once per statement shape instead (``column``, ``params_of``)."""
    return column(connection, field).value(connection, value)


class Column:
    """A field as a statement's parameter, its way of conversion on one database
    looked up once: ``value`` is ``db_value``. Each value's lookup by field (hashing a
    Django field is a Python method) was most of a conversion that changes nothing."""

    __slots__ = ("_keys", "field", "kind", "name")

    def __init__(self, field: models.Field[Any, Any], kind: type) -> None:
        self.field = field
        self.kind = kind  # the one type of value stored unchanged; _Key or _Converted otherwise
        self.name = field.name
        self._keys: dict[object, object] = {}

    def value(self, connection: Any, value: object) -> object:
        if value is None or type(value) is self.kind:
            return value
        return self.convert(connection, value)

    def convert(self, connection: Any, value: object) -> object:
        """A value that is not None and not of ``kind``, converted."""
        if self.kind is _Moment and type(value) is datetime and value.tzinfo is not None:
            if value.tzinfo is UTC and connection.vendor == "sqlite" and connection.timezone is UTC:
                # What SQLite's adaptation makes of a time in UTC on a connection in UTC
                # (so USE_TZ: Django's connection.timezone is None otherwise, and is made
                # again when either setting changes): the time's text without its
                # "+00:00", less a read of USE_TZ and the time made naive (some 5,000
                # instructions; a step writes six).
                return str(value)[:-6]
            # What the field's conversion comes to for an aware time (its checks for a
            # lazy string and a naive time pass it by): the backend's adaptation alone.
            return connection.ops.adapt_datetimefield_value(value)
        if self.kind is _Redacted and type(value) is MaskedJSON:
            # What the column's own conversion comes to for the text masking produced
            # (its checks for None and an expression pass it by): a checkpoint hands in
            # the state's and each event's.
            return as_written(value, connection)
        if self.kind is _MaskedText and value == "":
            # Nothing to mask (a receipt's problem, most often): the field's conversion
            # scans it all the same (some 20,000 instructions).
            return value
        if self.kind is _Key:
            found = self._keys.get(value)
            if found is None:
                if len(self._keys) > 1024:
                    self._keys.clear()
                found = self._keys[value] = self.field.get_db_prep_save(value, connection)
            return found
        return self.field.get_db_prep_save(value, connection)


def column(connection: Any, field: models.Field[Any, Any]) -> Column:
    """``field`` as a parameter on ``connection``'s database, made once."""
    key = (connection.vendor, field)
    found = _columns.get(key)
    if found is None:
        found = _columns[key] = Column(field, _kind(connection, field))
    return found


def params_of(connection: Any, columns: Sequence[Column], values: Mapping[str, object]) -> list[object]:
    """The parameters of one row: each column's value in ``values``, converted."""
    return [v if v is None or type(v) is c.kind else c.convert(connection, v) for c in columns for v in [values[c.name]]]


class _Key:
    """Marks a uuid (or a key to one): its values' conversions are remembered."""


class _Moment:
    """Marks a time column: an aware time goes to the backend's adaptation directly."""


class _Redacted:
    """Marks a redacted JSON column: the JSON text masking produced goes in as it is."""


class _MaskedText:
    """Marks a redacted text column: the empty text goes in as it is."""


class _Converted:
    """Marks a field whose every value goes through Django's conversion."""


def _kind(connection: Any, field: models.Field[Any, Any]) -> type:
    """The one type of value ``field`` stores unchanged on ``connection``."""
    if type(field) in (models.CharField, models.TextField):
        return str
    if type(field) is models.BooleanField:
        return bool
    integers_as_given = type(connection.ops).adapt_integerfield_value is BaseDatabaseOperations.adapt_integerfield_value
    if type(field) in (models.IntegerField, models.PositiveIntegerField, models.BigIntegerField) and integers_as_given:
        return int
    if isinstance(field, models.UUIDField) or isinstance(field, models.ForeignKey) and isinstance(field.target_field, models.UUIDField):
        return _Key
    if type(field) is models.DateTimeField:
        return _Moment
    if isinstance(field, RedactedJSONField):
        return _Redacted
    if isinstance(field, RedactedTextField):
        return _MaskedText
    return _Converted


_columns: dict[tuple[str, models.Field[Any, Any]], Column] = {}


_Statement = tuple[str, str, str, list[Column]]
_statements: dict[tuple[Any, ...], _Statement] = {}


def _statement(
    connection: Any,
    model: type[models.Model],
    names: tuple[str, ...],
    unique: tuple[str, ...],
    update: tuple[str, ...],
    returning: tuple[str, ...],
    numbered: tuple[str, ...] | None = None,
) -> _Statement:
    """The statement's parts (head, tail, one row's VALUES) and fields, built once per
    shape (a checkpoint sends the same few shapes every step). ``numbered``: the
    INSERT selects from the ``reserved`` row, these fields taking their seq from it."""
    key = (connection.vendor, model, names, unique, update, returning, numbered)
    found = _statements.get(key)
    if found is not None:
        return found
    quote = connection.ops.quote_name
    meta = model._meta
    fields = [_column(meta, name) for name in names]
    params = [column(connection, field) for field in fields]
    columns = [quote(field.column) for field in fields]
    conflict = _conflict_and_returning(quote, meta, unique, update, returning)
    # Only the model's quoted identifiers are spliced in; every value is a parameter.
    insert = f"INSERT INTO {quote(meta.db_table)} ({', '.join(columns)}) "
    if numbered is None:
        found = (insert + "VALUES ", conflict, "(" + ", ".join(["%s"] * len(fields)) + ")", params)
    else:
        chosen = [
            f"{RESERVED}.{quote(LAST_SEQ)} - given.{column}" if field.name in numbered else f"given.{column}"
            for field, column in zip(fields, columns, strict=True)
        ]
        # cast_db_type is Django's, missing from django-stubs.
        casts = ["%s::integer" if field.name in numbered else f"%s::{field.cast_db_type(connection)}" for field in fields]  # type: ignore[attr-defined]
        head = f"{insert}SELECT {', '.join(chosen)} FROM {RESERVED}, (VALUES "  # noqa: S608
        found = (head, f") AS given ({', '.join(columns)}){conflict}", "(" + ", ".join(casts) + ")", params)
    _statements[key] = found
    return found


def _column(meta: Options[Any], name: str) -> models.Field[Any, Any]:
    """The model's field stored in a column of its own (not a reverse relation)."""
    field = meta.get_field(name)
    if not isinstance(field, models.Field):
        raise TypeError(f"{meta.label}.{name} is not a column")
    return field
