"""A Model Context Protocol server over stdio inside the run's sandbox container
(docs/design.md, Outside tools): its command, from the admin's configuration, runs as
the sandbox user through an execution with its standard input open
(``SandboxContainer.attach``, the channel the egress relay uses too), and the SDK's
session talks to it over that execution's socket: one JSON-RPC message a line each
way, the server's standard error logged, never read as an answer. Every byte it sends
counts against the conversation's budget, so a server that floods is cut off."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from typing import Any, Protocol

import anyio
import anyio.to_thread
import mcp_types as types
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp.shared.message import SessionMessage

from sandbox.exec_stream import frames
from sandbox.mcp.config import Attach

log = logging.getLogger(__name__)

# What the SDK's ``Client`` reads and writes (its transport's pair of streams).
Streams = tuple[MemoryObjectReceiveStream[SessionMessage | Exception], MemoryObjectSendStream[SessionMessage]]


class Budget(Protocol):
    limit: int
    used: int
    exceeded: bool


def _next(frames: Iterator[tuple[int, bytes]]) -> tuple[int, bytes] | None:
    try:
        return next(frames)
    except (StopIteration, OSError):
        return None


@asynccontextmanager
async def exec_stdio(attach: Attach, command: list[str], budget: Budget) -> AsyncIterator[Streams]:
    """The SDK's pair of streams over ``command`` run in the container; leaving closes
    the socket, which ends the server's input (it exits on end of input)."""
    sock = attach(command)
    raw: Any = getattr(sock, "_sock", sock)
    incoming, read_stream = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    write_stream, outgoing = anyio.create_memory_object_stream[SessionMessage](0)
    stream_frames = frames(sock)

    async def read() -> None:
        buffer = b""
        async with incoming:
            while True:
                # A blocking read in a thread: closing the socket on the way out ends it.
                frame = await anyio.to_thread.run_sync(_next, stream_frames, abandon_on_cancel=True)
                if frame is None:
                    return
                stream, data = frame
                budget.used += len(data)
                if budget.used > budget.limit:
                    budget.exceeded = True
                    return
                if stream != 1:
                    log.info("MCP server %s: %s", command[0], data[:500].decode(errors="replace"))
                    continue
                buffer += data
                *lines, buffer = buffer.split(b"\n")
                for line in lines:
                    if line.strip():
                        await incoming.send(_parsed(line))

    async def write() -> None:
        async with outgoing:
            async for message in outgoing:
                data = message.message.model_dump_json(by_alias=True, exclude_unset=True).encode() + b"\n"
                await anyio.to_thread.run_sync(raw.sendall, data)

    try:
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(read)
            tasks.start_soon(write)
            try:
                yield read_stream, write_stream
            finally:
                tasks.cancel_scope.cancel()
    finally:
        # already shut: the server ended on its own
        with contextlib.suppress(OSError):
            sock.close()


def _parsed(line: bytes) -> SessionMessage | Exception:
    try:
        return SessionMessage(types.jsonrpc_message_adapter.validate_json(line, by_name=False))
    except ValueError as exc:
        # Given to the session as a value: it reports a line that is not JSON-RPC.
        return exc
