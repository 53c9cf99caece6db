"""The task contract: what a run is asked to do and the limits it asks for.

``check_contract`` validates the raw JSON and names every offending field; the
limits a run actually gets are the contract's intersected with policy."""

from __future__ import annotations

from collections.abc import Container, Mapping
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from core.errors import FieldProblem, InputError, described, problems_from
from core.paths import PathRefused, canonical_path

LIMIT_NAMES = (
    "max_proposals",
    "max_tool_calls",
    "max_attempts",
    "wall_time_seconds",
    "max_output_bytes_per_call",
)


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class Limits(Strict):
    max_proposals: int = Field(ge=1, le=100_000)
    max_tool_calls: int = Field(ge=0, le=100_000)
    max_attempts: int = Field(ge=1, le=100)
    wall_time_seconds: int = Field(ge=1, le=7 * 24 * 3600)
    max_output_bytes_per_call: int = Field(ge=1024, le=100_000_000)

    def intersect(self, bound: Limits) -> Limits:
        return Limits(**{name: min(getattr(self, name), getattr(bound, name)) for name in LIMIT_NAMES})

    def capped(self, caps: Mapping[str, int]) -> Limits:
        """No limit above its cap in ``caps`` (a partial mapping: a project's bounds)."""
        return Limits(**{name: min(getattr(self, name), caps.get(name, getattr(self, name))) for name in LIMIT_NAMES})

    def clipped_by(self, bound: Limits) -> dict[str, dict[str, int]]:
        """The limits the contract asked for above what policy allows."""
        return {
            name: {"asked": getattr(self, name), "allowed": getattr(bound, name)}
            for name in LIMIT_NAMES
            if getattr(self, name) > getattr(bound, name)
        }


class WorkspaceSource(Strict):
    """A directory, archive or git repository on the server (``path``), or a git
    remote (``url``, kind ``git`` only; the server decides which remotes are allowed)."""

    kind: Literal["path", "git", "archive"]
    path: str | None = Field(default=None, min_length=1)
    url: str | None = Field(default=None, min_length=1, max_length=2000)
    ref: str | None = None

    @model_validator(mode="after")
    def _one_location(self) -> WorkspaceSource:
        if (self.path is None) == (self.url is None):
            raise ValueError("give exactly one of path (on the server) or url (a git remote)")
        if self.url is not None and self.kind != "git":
            raise ValueError("a url is a git remote: its kind must be 'git'")
        return self


class Contract(Strict):
    task_id: str = Field(
        pattern=described(
            r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$", "1 to 100 letters, digits, '.', '_' or '-', starting with a letter or digit"
        )
    )
    objective: str = Field(min_length=1, max_length=20_000)
    acceptance_criteria: list[str] = Field(min_length=1)
    workspace: WorkspaceSource
    allowed_write_paths: list[str]
    allowed_tools: list[str] = Field(min_length=1)
    verification_targets: list[str] = Field(min_length=1)
    limits: Limits

    @field_validator("acceptance_criteria")
    @classmethod
    def _criteria_not_blank(cls, value: list[str]) -> list[str]:
        if any(not item.strip() for item in value):
            raise ValueError("criteria must not be blank")
        return value

    @field_validator("allowed_write_paths")
    @classmethod
    def _write_globs_relative(cls, value: list[str]) -> list[str]:
        for pattern in value:
            try:
                canonical_path(pattern)
            except PathRefused as exc:
                raise ValueError(f"{pattern!r}: {exc}") from None
        return value

    @field_validator("allowed_tools", "verification_targets")
    @classmethod
    def _unique(cls, value: list[str]) -> list[str]:
        if len(set(value)) != len(value):
            raise ValueError("entries must be unique")
        return value


def check_contract(raw: object, known_tools: Container[str], known_checks: set[str]) -> Contract:
    """Validate a parsed contract; raise InputError naming every bad field."""
    if not isinstance(raw, dict):
        raise InputError("contract", [FieldProblem("(root)", "a contract must be a JSON object")])
    try:
        contract = Contract.model_validate(raw)
    except ValidationError as exc:
        raise InputError("contract", problems_from(exc)) from None
    problems = [
        FieldProblem(f"allowed_tools[{i}]", f"unknown tool {name!r}")
        for i, name in enumerate(contract.allowed_tools)
        if name not in known_tools
    ]
    problems += [
        FieldProblem(f"verification_targets[{i}]", f"unknown check {name!r}")
        for i, name in enumerate(contract.verification_targets)
        if name not in known_checks
    ]
    if problems:
        raise InputError("contract", problems)
    return contract
