"""Errors the core raises for input it refuses. Each names the offending field."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError
from pydantic_core import ErrorDetails


@dataclass(frozen=True)
class FieldProblem:
    """One thing wrong with an input, naming its field: what a refusal raises, what an
    ``invalid_input`` (or a secret scan's refusal) records and what the proposer is
    shown (core.events, core.feedback), stored as ``{"field": ..., "message": ...}``."""

    field: str
    message: str

    def __str__(self) -> str:
        # "(root)" or "(run)" name the whole input, not a field a person could find.
        return self.message if self.field.startswith("(") else f"{self.field}: {self.message}"


class InputError(Exception):
    """Refused input; ``problems`` lists every offending field, not just the first."""

    def __init__(self, what: str, problems: list[FieldProblem]) -> None:
        self.what = what
        self.problems = problems
        super().__init__(f"invalid {what}: " + "; ".join(str(p) for p in problems))


def json_message(exc: json.JSONDecodeError) -> str:
    """Where a JSON text stops parsing, without the parser's character offset."""
    return f"not valid JSON: {exc.msg[0].lower()}{exc.msg[1:]} at line {exc.lineno}, column {exc.colno}"


def field_path(loc: tuple[int | str, ...], prefix: str = "") -> str:
    parts = [prefix] if prefix else []
    for item in loc:
        if isinstance(item, int):
            parts.append(f"[{item}]")
        else:
            parts.append(("." if parts else "") + item)
    text = "".join(parts)
    return text or "(root)"


# What a value that must match a pattern looks like, in words (see ``described``).
_PATTERN_WORDS: dict[str, str] = {}

# The validator's words for a type it wanted, as a person who writes JSON reads them.
_TYPE_WORDS = {
    "string_type": "must be text (a JSON string)",
    "int_type": "must be a whole number",
    "int_parsing": "must be a whole number",
    "int_from_float": "must be a whole number",
    "float_type": "must be a number",
    "float_parsing": "must be a number",
    "bool_type": "must be true or false",
    "bool_parsing": "must be true or false",
    "list_type": "must be a list (a JSON array)",
    "dict_type": "must be an object (a JSON object)",
    "model_type": "must be an object (a JSON object)",
    "model_attributes_type": "must be an object (a JSON object)",
    "missing": "required",
    "extra_forbidden": "unexpected field (extra fields are rejected)",
    "none_required": "must be left out",
}


def described(pattern: str, words: str) -> str:
    """A field's pattern, registered with the words a refusal uses for it."""
    _PATTERN_WORDS[pattern] = words
    return pattern


def _plural(count: int, word: str) -> str:
    return f"{count} {word}" if count == 1 else f"{count} {word}s"


def human_message(err: ErrorDetails) -> str:
    """One validator error in a person's words; an error type this does not know keeps
    the validator's own message, which still names what was wrong."""
    kind = err["type"]
    ctx: dict[str, Any] = dict(err.get("ctx") or {})
    if kind in _TYPE_WORDS:
        return _TYPE_WORDS[kind]
    if kind == "string_too_short":
        return "must not be empty" if ctx.get("min_length") == 1 else f"must have at least {_plural(ctx['min_length'], 'character')}"
    if kind == "string_too_long":
        return f"must have at most {_plural(ctx['max_length'], 'character')}"
    if kind == "too_short":
        return "must list at least one item" if ctx.get("min_length") == 1 else f"must list at least {_plural(ctx['min_length'], 'item')}"
    if kind == "too_long":
        return f"must list at most {_plural(ctx['max_length'], 'item')}"
    bounds = {"greater_than_equal": "at least", "greater_than": "more than", "less_than_equal": "at most", "less_than": "less than"}
    if kind in bounds:
        limit = next(iter(ctx.values()), "")
        return f"must be {bounds[kind]} {limit}"
    if kind == "literal_error":
        return f"must be one of {ctx.get('expected', '')}"
    if kind == "string_pattern_mismatch":
        pattern = str(ctx.get("pattern", ""))
        return f"must be {_PATTERN_WORDS[pattern]}" if pattern in _PATTERN_WORDS else f"does not have the expected form ({pattern})"
    if kind in ("value_error", "assertion_error"):
        return str(ctx.get("error", err["msg"]))
    return err["msg"]


def problems_from(exc: ValidationError, prefix: str = "") -> list[FieldProblem]:
    return [FieldProblem(field_path(tuple(err["loc"]), prefix), human_message(err)) for err in exc.errors()]
