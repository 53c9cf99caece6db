"""Writing many rows in one statement, for the checkpoint's hot path.

``insert`` sends one multi-row INSERT (an upsert when given the unique fields and
the fields to update) built straight from the model's fields. It is the statement
``bulk_create`` sends, with a fraction of the Python work per call, which matters
when a durable step is a handful of such statements."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from django.db import DEFAULT_DB_ALIAS, connections, models
from django.db.models.options import Options


def insert(
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
    # The connection itself, not django.db.connection: that proxy looks it up again
    # (a context-local read) on every attribute, dozens of times per row here.
    connection = connections[DEFAULT_DB_ALIAS]
    head, tail, placeholders, fields = _statement(connection, model, tuple(rows[0]), tuple(unique), tuple(update), tuple(returning))
    batch = connection.ops.bulk_batch_size(fields, rows) or len(rows)
    written: list[tuple[Any, ...]] = []
    with checkpoint_cursor(connection) as cursor:
        for start in range(0, len(rows), batch):
            chunk = rows[start : start + batch]
            params = [field.get_db_prep_save(row[field.name], connection) for row in chunk for field in fields]
            cursor.execute(head + ", ".join([placeholders] * len(chunk)) + tail, params)
            if returning:
                written += cursor.fetchall()
    return written


def checkpoint_cursor(connection: Any) -> Any:
    """A cursor for the checkpoint's statements. On PostgreSQL it binds the values on
    the server (psycopg's own cursor) where Django's default cursor quotes every value
    into the SQL text in Python, about 100 µs of CPU per statement here. It is wrapped
    like any Django cursor, so database errors, execute wrappers and query capture
    treat its statements as they treat all others."""
    if connection.vendor != "postgresql":
        return connection.cursor()
    # django-stubs does not declare ServerBindingCursor (Django 5.1's server-side binding).
    from django.db.backends.postgresql.base import ServerBindingCursor  # type: ignore[attr-defined]

    connection.close_if_health_check_failed()
    connection.ensure_connection()
    with connection.wrap_database_errors:
        return connection._prepare_cursor(ServerBindingCursor(connection.connection))


_Statement = tuple[str, str, str, list[models.Field]]
_statements: dict[tuple[Any, ...], _Statement] = {}


def _statement(
    connection: Any,
    model: type[models.Model],
    names: tuple[str, ...],
    unique: tuple[str, ...],
    update: tuple[str, ...],
    returning: tuple[str, ...],
) -> _Statement:
    """The statement's parts and fields, built once per shape (a checkpoint sends the
    same few shapes every step)."""
    key = (connection.vendor, model, names, unique, update, returning)
    found = _statements.get(key)
    if found is not None:
        return found
    quote = connection.ops.quote_name
    meta = model._meta
    fields = [_column(meta, name) for name in names]
    # Only the model's quoted identifiers are spliced in; every value is a parameter.
    head = f"INSERT INTO {quote(meta.db_table)} ({', '.join(quote(field.column) for field in fields)}) VALUES "  # noqa: S608
    tail = ""
    if unique:
        targets = ", ".join(quote(_column(meta, name).column) for name in unique)
        changes = ", ".join(f"{column} = excluded.{column}" for column in (quote(_column(meta, name).column) for name in update))
        tail += f" ON CONFLICT ({targets}) DO UPDATE SET {changes}"
    if returning:
        tail += " RETURNING " + ", ".join(quote(_column(meta, name).column) for name in returning)
    placeholders = "(" + ", ".join(["%s"] * len(fields)) + ")"
    found = _statements[key] = (head, tail, placeholders, fields)
    return found


def _column(meta: Options[Any], name: str) -> models.Field[Any, Any]:
    """The model's field stored in a column of its own (not a reverse relation)."""
    field = meta.get_field(name)
    if not isinstance(field, models.Field):
        raise TypeError(f"{meta.label}.{name} is not a column")
    return field
