"""A run's MCP endpoint, /agent/runs/<run id>/mcp/ (docs/design.md, Agents): the run's
token first (runs.agents.tokens: 401 with ``WWW-Authenticate: Bearer`` for none, an
unknown one or an ended run's; 404 for another run's; each refusal audited), then MCP
over streamable HTTP (gateway.mcp_server). The SDK is imported on the first request
that passes, never when the web process starts (tests/test_startup_imports.py)."""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING

from channels.db import database_sync_to_async

from gateway.routing import Receive, Scope, Send, send_json

if TYPE_CHECKING:
    from gateway.mcp_server import Endpoint

RUN_KEY = "harness.run"
_endpoint: Endpoint | None = None


def bearer(scope: Scope) -> str | None:
    for name, value in scope.get("headers", []):
        if name.lower() == b"authorization":
            scheme, _, token = value.decode("latin-1").partition(" ")
            return token.strip() if scheme.lower() == "bearer" and token.strip() else None
    return None


def _authenticate(token: str | None, run_id: uuid.UUID) -> tuple[int, str] | tuple[None, int | None]:
    """(status, reason) when refused, else (None, the run's project)."""
    from runs.agents.tokens import Refused, authenticate

    held = authenticate(token, run_id, where="mcp")
    if isinstance(held, Refused):
        return held.status, held.reason
    return None, held.project_id


async def mcp_service(run_id: uuid.UUID, rest: str, scope: Scope, receive: Receive, send: Send) -> None:
    global _endpoint
    refused, detail = await database_sync_to_async(_authenticate)(bearer(scope), run_id)
    if refused == 401:
        challenge = 'Bearer realm="harness", error="invalid_token"'
        await send_json(send, 401, {"error": f"not authorized: {detail}"}, {"WWW-Authenticate": challenge})
        return
    if refused is not None:
        await send_json(send, 404, {"error": "no such run"})
        return
    if rest not in ("", "/"):
        await send_json(send, 404, {"error": "the run's MCP endpoint is /agent/runs/<run id>/mcp/"})
        return
    if _endpoint is None:
        from gateway.mcp_server import Endpoint

        _endpoint = Endpoint()
    # The run this request was authorized for, for the handlers (the SDK hands them the
    # request whose scope this is); whatever the client sent under the same name is replaced.
    await _endpoint.handle({**scope, RUN_KEY: str(run_id)}, receive, send)
