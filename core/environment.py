"""Where a run's calls execute: the executor, the workspace and the hooks the
composition root (runs.runtime) fills in, so the core and the sandbox share the type
without importing Django or each other."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from core.ports import Executor, Workspace
from core.tools import ToolSpec


@dataclass(frozen=True)
class RepositoryContext:
    """What a model's first message shows of the workspace: the repository's own
    instructions, its file list and the files the run may change. All of it comes
    from the workspace, so the adapters present it as untrusted data."""

    instructions: str | None = None
    state: str | None = None
    sources: Sequence[tuple[str, str]] = field(default_factory=tuple)


def no_repository_context(write_paths: Sequence[str], allowed_tools: Sequence[str]) -> RepositoryContext:
    return RepositoryContext()


@dataclass
class Environment:
    executor: Executor
    workspace: Workspace
    close: Callable[[], None] = lambda: None  # remove the run's container at the end
    kill: Callable[[], None] = lambda: None  # kill the execution in flight (kill switch)
    # The repository as a model's first message shows it, given the contract's write
    # globs and allowed tools.
    repository: Callable[[Sequence[str], Sequence[str]], RepositoryContext] = no_repository_context
    # The tools of the project's MCP servers, as listed when the environment was made
    # (core.mcp); the run's registry is the built-in tools and these.
    tools: Sequence[ToolSpec] = ()
