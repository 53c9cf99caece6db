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
from typing import Any

from django.db import models
from django.db.backends.base.operations import BaseDatabaseOperations
from django.db.models.options import Options

from common.cursors import checkpoint_cursor

__all__ = ["LAST_SEQ", "RESERVED", "Rows", "SeqOf", "checkpoint_cursor", "db_value", "insert", "insert_rows", "numbered_insert"]


def insert(
    connection: Any,
    model: type[models.Model],
    rows: Sequence[Mapping[str, object]],
    *,
    unique: Sequence[str] = (),
    update: Sequence[str] = (),
    returning: Sequence[str] = (),
) -> list[tuple[Any, ...]]:
    """Insert ``rows`` (field name -> value, the same fields in each), one statement
    per batch the database accepts. With ``unique``, a row that collides on those
    fields updates ``update`` instead. Returns the ``returning`` columns of the rows
    written, in no particular order."""
    if not rows:
        return []
    head, tail, placeholders, fields = _statement(connection, model, tuple(rows[0]), tuple(unique), tuple(update), tuple(returning))
    batch = connection.ops.bulk_batch_size(fields, rows) or len(rows)
    written: list[tuple[Any, ...]] = []
    with checkpoint_cursor(connection) as cursor:
        for start in range(0, len(rows), batch):
            chunk = rows[start : start + batch]
            params = [db_value(connection, field, row[field.name]) for row in chunk for field in fields]
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
class Rows:
    """One table's rows for a checkpoint (the same fields in each); with ``unique``, a
    row that collides on those fields updates ``update`` instead."""

    model: type[models.Model]
    rows: Sequence[Mapping[str, object]]
    unique: tuple[str, ...] = ()
    update: tuple[str, ...] = ()


def insert_rows(connection: Any, rows: Rows, seqs: Sequence[int]) -> None:
    """``rows`` written with each ``SeqOf`` replaced by its seq."""
    resolved = [{name: seqs[value.index] if isinstance(value, SeqOf) else value for name, value in row.items()} for row in rows.rows]
    insert(connection, rows.model, resolved, unique=rows.unique, update=rows.update)


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
    head, tail, row_sql, fields = _statement(connection, rows.model, tuple(first), rows.unique, rows.update, tuple(returning), numbered)
    params: list[object] = []
    for row in rows.rows:
        for field in fields:
            value = row[field.name]
            params.append(count - 1 - value.index if isinstance(value, SeqOf) else db_value(connection, field, value))
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
    the same run in every row)."""
    kind = _kinds.get((connection.vendor, field))
    if kind is None:
        kind = _kinds[(connection.vendor, field)] = _kind(connection, field)
    if value is None or type(value) is kind:
        return value
    if kind is _Key:
        key = (connection.vendor, field, value)
        found = _keys.get(key)
        if found is None:
            if len(_keys) > 1024:
                _keys.clear()
            found = _keys[key] = field.get_db_prep_save(value, connection)
        return found
    return field.get_db_prep_save(value, connection)


class _Key:
    """Marks a uuid (or a key to one): its values' conversions are remembered."""


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
    return _Converted


_kinds: dict[tuple[str, models.Field[Any, Any]], type] = {}
_keys: dict[tuple[str, models.Field[Any, Any], object], object] = {}


_Statement = tuple[str, str, str, list[models.Field]]
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
    columns = [quote(field.column) for field in fields]
    conflict = _conflict_and_returning(quote, meta, unique, update, returning)
    # Only the model's quoted identifiers are spliced in; every value is a parameter.
    insert = f"INSERT INTO {quote(meta.db_table)} ({', '.join(columns)}) "
    if numbered is None:
        found = (insert + "VALUES ", conflict, "(" + ", ".join(["%s"] * len(fields)) + ")", fields)
    else:
        chosen = [
            f"{RESERVED}.{quote(LAST_SEQ)} - given.{column}" if field.name in numbered else f"given.{column}"
            for field, column in zip(fields, columns, strict=True)
        ]
        # cast_db_type is Django's, missing from django-stubs.
        casts = ["%s::integer" if field.name in numbered else f"%s::{field.cast_db_type(connection)}" for field in fields]  # type: ignore[attr-defined]
        head = f"{insert}SELECT {', '.join(chosen)} FROM {RESERVED}, (VALUES "  # noqa: S608
        found = (head, f") AS given ({', '.join(columns)}){conflict}", "(" + ", ".join(casts) + ")", fields)
    _statements[key] = found
    return found


def _column(meta: Options[Any], name: str) -> models.Field[Any, Any]:
    """The model's field stored in a column of its own (not a reverse relation)."""
    field = meta.get_field(name)
    if not isinstance(field, models.Field):
        raise TypeError(f"{meta.label}.{name} is not a column")
    return field
