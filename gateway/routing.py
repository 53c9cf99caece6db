"""Which service of the gateway a request is for: /agent/runs/<run id>/<service>/<rest>."""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

# As Django's ASGI handler types them, so the site can be handed in as it is.
Scope = dict[str, Any]
Receive = Callable[[], Awaitable[Mapping[str, Any]]]
Send = Callable[[Mapping[str, Any]], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]
# A service is given the run the path names and the rest of the path after the service.
Service = Callable[[uuid.UUID, str, Scope, Receive, Send], Awaitable[None]]

PREFIX = "/agent/"
_PATH = re.compile(r"^/agent/runs/(?P<run>[0-9a-fA-F-]{36})/(?P<service>[a-z]+)(?P<rest>/.*)?$")


async def send_json(send: Send, status: int, body: object, headers: Mapping[str, str] | None = None) -> None:
    raw = json.dumps(body).encode()
    head = [(b"content-type", b"application/json"), (b"content-length", str(len(raw)).encode())]
    head += [(name.lower().encode(), value.encode()) for name, value in (headers or {}).items()]
    await send({"type": "http.response.start", "status": status, "headers": head})
    await send({"type": "http.response.body", "body": raw})


def gateway(services: Mapping[str, Service], site: ASGIApp) -> ASGIApp:
    """``site`` serves every path outside /agent/; a path under it that names no run or
    no service gets a 404 that says so (never the site's HTML page)."""

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "")
        if scope["type"] != "http" or not path.startswith(PREFIX):
            await site(scope, receive, send)
            return
        match = _PATH.match(path)
        service = services.get(match["service"]) if match else None
        if match is None or service is None:
            await send_json(send, 404, {"error": f"no agent service at {path[:200]}"})
            return
        try:
            run_id = uuid.UUID(match["run"])
        except ValueError:
            await send_json(send, 404, {"error": "the path names no run"})
            return
        await service(run_id, match["rest"] or "/", scope, receive, send)

    return app
