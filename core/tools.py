"""The tool registry: name, version, argument schema and what a tool can do to the
world. The harness decides gates from these entries, never from the model's claims and
never from a tool's name: what a tool writes, whether it has an effect outside the
workspace, whether it needs or produces evidence, whether it ends the run, all is in its
entry. What runs it, and what a reviewer is shown of it, sits beside its handler in
``sandbox.tools.registry``; adding a tool is one entry here and one there."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from core.errors import FieldProblem, InputError, described, problems_from
from core.jsonschemas import schema_checked
from core.jsonutil import JSON
from core.patchtext import patch_targets
from core.paths import PathRefused, canonical_path, path_allowed
from core.visible import char_name, holds_hidden, is_hidden


class Args(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


def _canonical(value: str) -> str:
    try:
        return canonical_path(value)
    except PathRefused as exc:
        raise ValueError(str(exc)) from None


class PathArgs(Args):
    path: str = Field(min_length=1, max_length=4096)

    @field_validator("path")
    @classmethod
    def _path(cls, value: str) -> str:
        return _canonical(value)


class ListFilesArgs(Args):
    path: str = Field(default=".", min_length=1, max_length=4096)
    max_entries: int = Field(default=500, ge=1, le=10_000)

    @field_validator("path")
    @classmethod
    def _path(cls, value: str) -> str:
        return _canonical(value)


class ReadFileArgs(PathArgs):
    offset: int = Field(default=0, ge=0, description="first line, 0-based")
    limit: int = Field(default=400, ge=1, le=10_000, description="number of lines")


class SearchArgs(Args):
    pattern: str = Field(min_length=1, max_length=500, description="literal text to find")
    path: str = Field(default=".", min_length=1, max_length=4096)
    max_matches: int = Field(default=200, ge=1, le=5000)

    @field_validator("path")
    @classmethod
    def _path(cls, value: str) -> str:
        return _canonical(value)


class WriteFileArgs(PathArgs):
    content: str = Field(max_length=5_000_000)


class ApplyPatchArgs(Args):
    patch: str = Field(min_length=1, max_length=5_000_000, description="a unified diff")

    @field_validator("patch")
    @classmethod
    def _targets(cls, value: str) -> str:
        patch_targets(value)  # the applier's own reading: PatchRefused names the problem
        return value


class RunCheckArgs(Args):
    check_id: str = Field(min_length=1, max_length=64)


# Line breaks and tabs, which the pages show as they are (core.visible) but which
# would let a one-line value pass for several.
_BREAKS = "\n\r\t"
# Git's trailer parser stops at a line starting with "---" (a patch divider), so a
# message holding one would end before Harness's own trailers; and the "Harness-"
# trailer names are Harness's alone.
_DIVIDER = re.compile(r"^---", re.MULTILINE)
_OWN_TRAILER = re.compile(r"^[ \t]*harness-[A-Za-z0-9-]*[ \t]*:", re.MULTILINE | re.IGNORECASE)


def refuse_hiding(value: str, allowed: str = "") -> str:
    """``value`` unless it holds a character that would hide text, reorder it on
    screen or not be storable (core.visible's one definition: controls, format
    characters, tags, separators, lone surrogates), or a line break or tab, other than
    ``allowed``; named with its position so the model can correct it."""
    if not holds_hidden(value) and not any(char in value for char in _BREAKS if char not in allowed):
        return value
    for at, char in enumerate(value):
        if char not in allowed and (char in _BREAKS or is_hidden(char)):
            kept = " other than " + ", ".join(repr(c) for c in allowed) if allowed else ""
            raise ValueError(f"holds the control character {char!r} ({char_name(char)}) at position {at}; no control characters{kept}")
    return value


class PublishArgs(Args):
    message: str = Field(min_length=1, max_length=2000)

    @field_validator("message")
    @classmethod
    def _message(cls, value: str) -> str:
        refuse_hiding(value, "\n\t")
        if _DIVIDER.search(value):
            raise ValueError("a line may not start with '---' (git reads it as the end of the commit message)")
        if _OWN_TRAILER.search(value):
            raise ValueError("a line may not start with a 'Harness-' trailer: Harness adds its own trailers to the commit")
        return value


class ChangeRequestArgs(Args):
    title: str = Field(min_length=1, max_length=250, pattern=r"\S")
    body: str = Field(default="", max_length=60_000)

    @field_validator("title")
    @classmethod
    def _title(cls, value: str) -> str:
        return refuse_hiding(value)

    @field_validator("body")
    @classmethod
    def _body(cls, value: str) -> str:
        return refuse_hiding(value, "\n\t\r")


class LookupPublishArgs(Args):
    idempotency_key: str | None = Field(
        default=None,
        pattern=described(r"^[0-9a-f]{32}$", "32 lowercase hexadecimal digits"),
        description="the publish to look up; leave it out for this run's publish (the unresolved one, else the latest)",
    )


class FinishArgs(Args):
    summary: str = Field(default="", max_length=20_000)


@dataclass(frozen=True)
class Writes:
    """The workspace files a call writes, read from one of its arguments."""

    arg: str
    paths: Callable[[str], list[str]]

    def of(self, args: Mapping[str, JSON]) -> list[str]:
        return self.paths(str(args[self.arg]))


def _one_path(path: str) -> list[str]:
    return [path]


@dataclass(frozen=True)
class ToolSpec:
    name: str
    version: str
    description: str
    args: type[Args]
    writes: Writes | None = None  # the workspace files it changes
    external_effect: bool = False  # changes something outside the workspace
    needs_evidence: bool = False  # refused without a passing check of the current revision
    runs_untrusted_code: bool = False  # may change the workspace even without writing
    # The argument naming the policy check the call runs; its receipt becomes evidence.
    runs_check: str | None = None
    looks_up: str | None = None  # finds whether an effect of the named tool happened, by its idempotency key
    # Declares the task done: always offered, and refused until the current revision
    # has passing checks.
    finishes: bool = False
    # What of the workspace the model can see through it; the task message shows as
    # much up front and never more (sandbox.workspace.run_workspace.RunWorkspace.repository_context).
    shows: Literal["file_contents", "file_list"] | None = None
    # One line for the reviewer: what happens if this call is granted (effectful tools).
    reviewer_summary: str = ""
    # A tool from an MCP server (core.mcp): its arguments are checked against this
    # JSON Schema instead of ``args``, and ``source`` names its server.
    input_schema: Mapping[str, JSON] | None = None
    source: str = ""

    @property
    def writes_workspace(self) -> bool:
        return self.writes is not None

    @property
    def has_effect(self) -> bool:
        return self.writes_workspace or self.external_effect

    @property
    def may_change_workspace(self) -> bool:
        return self.writes_workspace or self.runs_untrusted_code

    def written_paths(self, args: Mapping[str, JSON]) -> list[str]:
        return self.writes.of(args) if self.writes is not None else []

    def json_schema(self) -> dict[str, JSON]:
        if self.input_schema is not None:
            return dict(self.input_schema)
        return self.args.model_json_schema()


FINISH = "finish"


class Registry:
    def __init__(self, specs: Iterable[ToolSpec]) -> None:
        self._specs = {spec.name: spec for spec in specs}

    def with_tools(self, specs: Iterable[ToolSpec]) -> Registry:
        """This registry and ``specs`` (an MCP server's tools); a name already taken is
        refused, so no server can stand in for a built-in tool."""
        added = list(specs)
        taken = [spec.name for spec in added if spec.name in self._specs]
        if taken:
            raise ValueError(f"tool names already in the registry: {', '.join(sorted(taken))}")
        return Registry([*self._specs.values(), *added])

    def get(self, name: str) -> ToolSpec | None:
        return self._specs.get(name)

    @property
    def names(self) -> set[str]:
        return set(self._specs)

    def finish(self) -> ToolSpec:
        found = [spec for spec in self._specs.values() if spec.finishes]
        if len(found) != 1:
            raise ValueError(f"the registry needs exactly one tool that finishes a run, has {len(found)}")
        return found[0]

    def visible(self, allowed: Iterable[str]) -> list[ToolSpec]:
        allowed_set = set(allowed)
        return [spec for name, spec in self._specs.items() if name in allowed_set or spec.finishes]

    def validate(self, spec: ToolSpec, args: Mapping[str, JSON], write_globs: Iterable[str]) -> dict[str, JSON]:
        """Schema check, then path canonicalisation and the contract's write paths."""
        if spec.input_schema is not None:
            return schema_checked(spec.input_schema, args)
        try:
            parsed = spec.args.model_validate(dict(args))
        except ValidationError as exc:
            raise InputError("arguments", problems_from(exc, "args")) from None
        clean: dict[str, JSON] = parsed.model_dump()
        if spec.writes is not None:
            globs = list(write_globs)
            refused = [t for t in spec.writes.of(clean) if not path_allowed(t, globs)]
            if refused:
                raise InputError(
                    "arguments",
                    [FieldProblem(f"args.{spec.writes.arg}", f"{', '.join(refused)} is outside allowed_write_paths {globs}")],
                )
        return clean


BUILTIN_TOOLS: tuple[ToolSpec, ...] = (
    ToolSpec(
        "list_files", "1", "List files under a workspace directory. Cannot read outside the workspace.", ListFilesArgs, shows="file_list"
    ),
    ToolSpec(
        "read_file",
        "1",
        "Read lines of a workspace file. Cannot follow symlinks or leave the workspace.",
        ReadFileArgs,
        shows="file_contents",
    ),
    ToolSpec("search", "1", "Find literal text in workspace files. Cannot run commands.", SearchArgs),
    ToolSpec(
        "write_file",
        "1",
        "Replace a workspace file's content. Only paths in the task's allowed write paths; no symlinks.",
        WriteFileArgs,
        writes=Writes("path", _one_path),
        reviewer_summary="Replaces the whole content of this one file in the run's workspace; nothing leaves the sandbox.",
    ),
    ToolSpec(
        "apply_patch",
        "1",
        "Apply a unified diff to workspace files. Refused as a whole when any hunk does not apply.",
        ApplyPatchArgs,
        writes=Writes("patch", patch_targets),
        reviewer_summary="Changes the workspace files exactly as the diff shows; nothing leaves the sandbox.",
    ),
    ToolSpec(
        "run_check",
        "1",
        "Run a verification check by id; the command is fixed by server configuration, not by you.",
        RunCheckArgs,
        runs_untrusted_code=True,
        runs_check="check_id",
    ),
    ToolSpec(
        "publish",
        "1",
        "Publish the workspace's changes as a patch. Needs a passing check of the current revision.",
        PublishArgs,
        external_effect=True,
        needs_evidence=True,
        reviewer_summary=(
            "Ships the workspace's changes against the base revision, exactly the diff shown, with this message, outside"
            " the sandbox; it happens once and cannot be taken back by the run."
        ),
    ),
    ToolSpec(
        "open_change_request",
        "1",
        "Open a pull request (GitHub) or merge request (GitLab) from the branch publish pushed into the base branch."
        " Refused until the branch is on the remote.",
        ChangeRequestArgs,
        external_effect=True,
        reviewer_summary=(
            "Opens a change request on the forge from the run's pushed branch into the base branch, with this title and"
            " body, under the server's forge account; others see it at once, and the run cannot take it back."
        ),
    ),
    ToolSpec(
        "lookup_publish",
        "1",
        "Ask whether this run's publish happened (or the publish with the given idempotency key); says whether the answer is authoritative.",
        LookupPublishArgs,
        looks_up="publish",
    ),
    ToolSpec(FINISH, "1", "Declare the task done. Refused until the current revision has passing checks.", FinishArgs, finishes=True),
)


def builtin_registry() -> Registry:
    return Registry(BUILTIN_TOOLS)
