"""Errors the core raises for input it refuses. Each names the offending field."""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import ValidationError


@dataclass(frozen=True)
class FieldProblem:
    field: str
    message: str

    def __str__(self) -> str:
        return f"{self.field}: {self.message}"


class InputError(Exception):
    """Refused input; ``problems`` lists every offending field, not just the first."""

    def __init__(self, what: str, problems: list[FieldProblem]) -> None:
        self.what = what
        self.problems = problems
        super().__init__(f"invalid {what}: " + "; ".join(str(p) for p in problems))


def field_path(loc: tuple[int | str, ...], prefix: str = "") -> str:
    parts = [prefix] if prefix else []
    for item in loc:
        if isinstance(item, int):
            parts.append(f"[{item}]")
        else:
            parts.append(("." if parts else "") + item)
    text = "".join(parts)
    return text or "(root)"


def problems_from(exc: ValidationError, prefix: str = "") -> list[FieldProblem]:
    problems = []
    for err in exc.errors():
        message = err["msg"]
        if err["type"] == "extra_forbidden":
            message = "unexpected field (extra fields are rejected)"
        problems.append(FieldProblem(field_path(tuple(err["loc"]), prefix), message))
    return problems
