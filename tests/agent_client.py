"""The MCP SDK's own client against a run's endpoint, for the agent tests: each call in
a conversation of its own (as an agent's retry after a timeout would be), run on a
thread of its own so the test can decide approvals meanwhile."""

from __future__ import annotations

import concurrent.futures
from dataclasses import dataclass, field
from typing import Any, cast

import anyio
import httpx2
import mcp_types as types
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.dispatcher import ProgressFnT


@dataclass
class Answer:
    text: str
    is_error: bool
    progress: list[str] = field(default_factory=list)


def endpoint(base: str, run_id: object) -> str:
    return f"{base}/agent/runs/{run_id}/mcp/"


async def _connected(url: str, token: str | None, work: Any, timeout: float) -> Any:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(timeout)) as http,
        Client(streamable_http_client(url, http_client=http), mode="legacy", cache=None, read_timeout_seconds=timeout) as client,
    ):
        return await work(client)


def list_tools(url: str, token: str) -> list[types.Tool]:
    async def work(client: Client) -> list[types.Tool]:
        return list((await client.list_tools()).tools)

    result: list[types.Tool] = anyio.run(_connected, url, token, work, 30.0)
    return result


def call(url: str, token: str, tool: str, args: dict[str, Any], timeout: float = 90.0) -> Answer:
    progress: list[str] = []

    async def on_progress(done: float, total: float | None, message: str | None) -> None:
        progress.append(message or "")

    async def work(client: Client) -> Answer:
        # As agents do (the SDK checks a result against the tool's listed output schema,
        # listing the tools first if it has not: no longer possible once the call ended the run).
        await client.list_tools()
        result = await client.call_tool(tool, args, read_timeout_seconds=timeout, progress_callback=cast(ProgressFnT, on_progress))
        text = "\n".join(item.text for item in result.content if isinstance(item, types.TextContent))
        return Answer(text, bool(result.is_error), progress)

    answer: Answer = anyio.run(_connected, url, token, work, timeout)
    return answer


def call_answered(url: str, token: str, tool: str, args: dict[str, Any], tries: int = 10) -> Answer:
    """As an agent does: a "still waiting" answer is followed by the same call again."""
    for _ in range(tries):
        answer = call(url, token, tool, args)
        if not answer.text.startswith("[harness] Still waiting"):
            return answer
    raise AssertionError(f"{tool} still waiting after {tries} calls")


_POOL = concurrent.futures.ThreadPoolExecutor(max_workers=4, thread_name_prefix="agent-client")


def call_later(url: str, token: str, tool: str, args: dict[str, Any], timeout: float = 90.0) -> concurrent.futures.Future[Answer]:
    """The call on a thread, made again while it is answered "still waiting" (as an agent does)."""
    return _POOL.submit(call_answered, url, token, tool, args)
