"""What naming, configuring and answering for a Model Context Protocol server needs,
without the SDK: its configuration, why a conversation failed, and a tool's answer.
The admin, the composition root and the run's tool registry import this; the SDK
(``sandbox.mcp.client``, about a third of a worker's import time) is imported on a
run's first conversation with a server (``sandbox.tools.mcp``), so no web, worker or
beat process, command or test session pays for it at start (tests/test_startup_imports.py)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from core.jsonutil import JSON

# Why a conversation ended without an answer: it could not be started (nothing was
# sent), the server did not answer in time, its answer was too large, or it failed.
Failure = Literal["not_sent", "no_answer", "too_large", "failed"]
# Starts a command in the run's sandbox container with its standard input open and
# gives back the execution's socket (``SandboxContainer.attach``).
Attach = Callable[[list[str]], Any]


@dataclass(frozen=True)
class McpServerConfig:
    name: str
    url: str = ""
    credential_env: str = ""
    idempotency_arg: str | None = None
    lookup_tool: str | None = None
    timeout_seconds: float = 30.0
    max_response_bytes: int = 8 * 2**20
    # A server over stdio in the run's sandbox: its argv (the url is then empty).
    command: tuple[str, ...] = ()


class McpFailure(Exception):
    def __init__(self, failure: Failure, message: str) -> None:
        super().__init__(message)
        self.failure = failure
        self.message = message


@dataclass
class Answer:
    """A tool's result as the server sent it, and what it asked for that was refused."""

    is_error: bool
    content: list[dict[str, JSON]]
    structured: JSON
    refused_requests: list[str] = field(default_factory=list)
