"""Arguments checked against a JSON Schema that came from outside (an MCP server's
tool, docs/design.md, Outside tools): the schema itself first, when the tool is
registered, then each call's arguments, before anything runs."""

from __future__ import annotations

from collections.abc import Mapping

from jsonschema import exceptions, validators

from core.errors import FieldProblem, InputError
from core.jsonutil import JSON


def check_schema(schema: Mapping[str, JSON]) -> None:
    """Raise ValueError naming the problem when ``schema`` is no valid JSON Schema of an
    object (a tool's arguments are an object)."""
    cls = validators.validator_for(schema)
    try:
        cls.check_schema(dict(schema))
    except exceptions.SchemaError as exc:
        raise ValueError(f"not a valid JSON Schema: {exc.message}") from None
    if schema.get("type") != "object":
        raise ValueError("a tool's input schema must have type 'object'")


def schema_checked(schema: Mapping[str, JSON], args: Mapping[str, JSON]) -> dict[str, JSON]:
    """``args`` unchanged when they match ``schema``, else InputError naming each
    problem by its place in the arguments (``args.title``)."""
    cls = validators.validator_for(schema)
    checker = cls(schema, format_checker=cls.FORMAT_CHECKER)
    found = sorted(checker.iter_errors(dict(args)), key=lambda e: [str(p) for p in e.absolute_path])
    if found:
        problems = [FieldProblem(".".join(["args", *(str(p) for p in e.absolute_path)]), e.message) for e in found]
        raise InputError("arguments", problems)
    return dict(args)
