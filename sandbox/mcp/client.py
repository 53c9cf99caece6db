"""One conversation with a Model Context Protocol server over streamable HTTP, from
the worker, with the official SDK (docs/design.md, Outside tools): list its tools, or
call one. Each conversation is bounded: the server's answer by a size
(``max_response_bytes``, counted on the wire), the whole by a time. The bearer token
is read from the worker's environment by the variable's name when the connection is
made, goes into the request's header and nowhere else, and is cut out of any error
text. A server asking the user for input (elicitation) or for a model's completion
(sampling) is refused: Harness never makes up an answer."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

import anyio
import httpx2
import mcp_types as types
from mcp import Client
from mcp.client import Transport
from mcp.client.streamable_http import streamable_http_client

from core.jsonutil import JSON
from sandbox.mcp.config import Answer, Attach, McpFailure, McpServerConfig
from sandbox.mcp.stdio import exec_stdio

T = TypeVar("T")
# What the server is told to say, in error data, when it asks for what Harness refuses.
REFUSED_INPUT = "Harness answers no elicitation: a run's tool calls get no input from a person or a model mid-call"


class _TooLarge(httpx2.ReadError):
    pass


class _CappedStream(httpx2.AsyncByteStream):
    def __init__(self, inner: httpx2.AsyncByteStream, budget: _Budget) -> None:
        self._inner = inner
        self._budget = budget

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for chunk in self._inner:
            self._budget.used += len(chunk)
            if self._budget.used > self._budget.limit:
                self._budget.exceeded = True
                raise _TooLarge(f"the server's answers passed {self._budget.limit} bytes")
            yield chunk

    async def aclose(self) -> None:
        await self._inner.aclose()


@dataclass
class _Budget:
    limit: int
    used: int = 0
    exceeded: bool = False


class _CappedTransport(httpx2.AsyncBaseTransport):
    """Counts every byte the server sends in one conversation; past the limit the
    read fails, so 50 MB is never held (the SDK's own limit is per SSE event only)."""

    def __init__(self, budget: _Budget) -> None:
        self._inner = httpx2.AsyncHTTPTransport()
        self._budget = budget

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        response = await self._inner.handle_async_request(request)
        stream = response.stream
        assert isinstance(stream, httpx2.AsyncByteStream)
        return httpx2.Response(
            response.status_code, headers=response.headers, stream=_CappedStream(stream, self._budget), extensions=response.extensions
        )

    async def aclose(self) -> None:
        await self._inner.aclose()


def credential(config: McpServerConfig, environ: Mapping[str, str]) -> str | None:
    if not config.credential_env:
        return None
    token = environ.get(config.credential_env)
    if not token:
        raise McpFailure("not_sent", f"the worker's environment has no {config.credential_env} (server {config.name}'s token)")
    return token


class Conversation:
    """One connection to ``config``'s server; ``run`` drives ``work`` over it."""

    def __init__(self, config: McpServerConfig, environ: Mapping[str, str], attach: Attach | None = None) -> None:
        self.config = config
        self._environ = environ
        self._attach = attach
        self._budget = _Budget(config.max_response_bytes)
        self.refused: list[str] = []
        self._token: str | None = None

    def _clean(self, text: str) -> str:
        return text.replace(self._token, "[credential]") if self._token else text

    async def _refuse_elicitation(self, context: Any, params: types.ElicitRequestParams) -> types.ErrorData:
        message = getattr(params, "message", "")
        self.refused.append(f"elicitation: {str(message)[:500]}")
        return types.ErrorData(code=types.INVALID_REQUEST, message=REFUSED_INPUT)

    async def _refuse_sampling(self, context: Any, params: types.CreateMessageRequestParams) -> types.ErrorData:
        self.refused.append("sampling")
        return types.ErrorData(code=types.INVALID_REQUEST, message=REFUSED_INPUT)

    @asynccontextmanager
    async def _client(self) -> AsyncIterator[Client]:
        if self.config.command:
            if self._attach is None:
                raise McpFailure("not_sent", f"MCP server {self.config.name} runs in the sandbox, and this run has none")
            async with self._session(exec_stdio(self._attach, list(self.config.command), self._budget)) as client:
                yield client
            return
        self._token = credential(self.config, self._environ)
        headers = {"Authorization": f"Bearer {self._token}"} if self._token else {}
        timeout = httpx2.Timeout(self.config.timeout_seconds)
        # trust_env off: no proxy or netrc from the worker's environment decides where the token goes.
        async with httpx2.AsyncClient(headers=headers, timeout=timeout, transport=_CappedTransport(self._budget), trust_env=False) as http:
            transport = streamable_http_client(self.config.url, http_client=http, max_sse_event_size=self.config.max_response_bytes)
            async with self._session(transport) as client:
                yield client

    @asynccontextmanager
    async def _session(self, transport: Transport) -> AsyncIterator[Client]:
        async with Client(
            transport,
            mode="legacy",
            cache=None,
            read_timeout_seconds=self.config.timeout_seconds,
            elicitation_callback=self._refuse_elicitation,
            sampling_callback=self._refuse_sampling,
        ) as client:
            yield client

    def run(self, work: Callable[[Client], Awaitable[T]]) -> T:
        """``work``'s value, or McpFailure saying whether anything reached the server:
        ``not_sent`` when the connection could not be made (so the call was never
        sent), else ``no_answer``, ``too_large`` or ``failed``."""
        sent = False

        async def main() -> T:
            nonlocal sent
            # The handshake and the call each get the whole timeout; the handshake's
            # failure means the call was never sent.
            with anyio.fail_after(self.config.timeout_seconds * 2):
                async with self._client() as client:
                    sent = True
                    return await work(client)

        try:
            return anyio.run(main)
        except McpFailure:
            raise
        except Exception as exc:  # noqa: BLE001 - the SDK's failures arrive as groups of anything; each is named below
            raise self._failure(exc, sent) from None

    def _failure(self, exc: Exception, sent: bool) -> McpFailure:
        name = self.config.name
        if self._budget.exceeded:
            return McpFailure("too_large", f"MCP server {name} sent more than {self._budget.limit} bytes; the answer was cut off")
        leaves = _leaves(exc)
        # The SDK names a request that got no answer in its read timeout so.
        if any(isinstance(e, TimeoutError) or "timed out" in str(e) for e in leaves):
            return McpFailure(
                "no_answer" if sent else "not_sent", f"MCP server {name} did not answer within {self.config.timeout_seconds:g}s"
            )
        detail = self._clean("; ".join(f"{type(e).__name__}: {e}" for e in leaves)[:500])
        if not sent:
            return McpFailure("not_sent", f"MCP server {name} could not be reached: {detail}")
        return McpFailure("failed", f"MCP server {name} failed: {detail}")


def _leaves(exc: BaseException) -> list[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for inner in exc.exceptions for leaf in _leaves(inner)]
    return [exc]


def list_tools(config: McpServerConfig, environ: Mapping[str, str], attach: Attach | None = None) -> tuple[str, list[types.Tool]]:
    """The server's version and every tool it lists (all pages)."""

    async def work(client: Client) -> tuple[str, list[types.Tool]]:
        info = client.server_info
        listed = await client.list_tools()
        return (info.version if info is not None else ""), list(listed.tools)

    return Conversation(config, environ, attach).run(work)


def call_tool(
    config: McpServerConfig, environ: Mapping[str, str], tool: str, arguments: Mapping[str, JSON], attach: Attach | None = None
) -> Answer:
    conversation = Conversation(config, environ, attach)

    async def work(client: Client) -> Answer:
        result = await client.call_tool(tool, dict(arguments), read_timeout_seconds=config.timeout_seconds)
        content: list[dict[str, JSON]] = []
        for item in result.content:
            if isinstance(item, types.TextContent):
                content.append({"type": "text", "text": item.text})
            else:
                content.append({"type": item.type, "omitted": "only text is passed on"})
        structured: JSON = result.structured_content if result.structured_content is not None else None
        return Answer(bool(result.is_error), content, structured, conversation.refused)

    try:
        return conversation.run(work)
    except McpFailure as exc:
        if conversation.refused:
            exc.message += f" (after Harness refused what the server asked: {', '.join(conversation.refused)})"
        raise
