"""A workspace MCP server for the agent CLIs' tests, written with the official SDK and
served over streamable HTTP on a free loopback port: it stands where Harness's per-run
endpoint will (issue 41). Two tools, ``read_file(path)`` and ``apply_patch(patch)``;
every call is appended to ``calls.jsonl`` and every request without the right bearer
token is refused (401) and appended to ``refused.jsonl``, both in the state directory.

As a process (what the tests start, :func:`workspace_mcp`):

    python3 tests/agents_support/mcp_server.py <state-dir>

with the token in ``HARNESS_TEST_MCP_TOKEN``; the port is written to ``<state-dir>/port``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

TOKEN_ENV = "HARNESS_TEST_MCP_TOKEN"
# What read_file answers for any path: a test looks for it in the model's next request.
FILE_TEXT = "def answer():\n    return 41  # marker-7c1f\n"
PATCH_RESULT = "patch applied: 1 file changed (marker-a93e)"


class WorkspaceMcp:
    def __init__(self, root: Path, token: str) -> None:
        self.root = root
        self.token = token
        self.port = 0
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    def _lines(self, name: str) -> list[dict[str, Any]]:
        path = self.root / name
        if not path.exists():
            return []
        return [json.loads(line) for line in path.read_text().splitlines() if line]

    def calls(self) -> list[dict[str, Any]]:
        """``{"tool": name, "args": {...}}`` for every tool call, in order."""
        return self._lines("calls.jsonl")

    def refused(self) -> list[dict[str, Any]]:
        """``{"method", "path", "authorization"}`` for every request refused with 401."""
        return self._lines("refused.jsonl")

    def start(self) -> None:
        port_file = self.root / "port"
        port_file.unlink(missing_ok=True)
        env = {**os.environ, TOKEN_ENV: self.token}
        self._process = subprocess.Popen([sys.executable, __file__, str(self.root)], env=env, start_new_session=True)
        deadline = time.monotonic() + 60
        while not port_file.exists() or not port_file.read_text():
            assert self._process.poll() is None, "the workspace MCP server exited"
            assert time.monotonic() < deadline, "the workspace MCP server did not start in 60s"
            time.sleep(0.05)
        self.port = int(port_file.read_text())

    def stop(self) -> None:
        if self._process is None:
            return
        try:
            os.killpg(self._process.pid, signal.SIGTERM)
            self._process.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(self._process.pid, signal.SIGKILL)
            self._process.wait(10)
        except ProcessLookupError:
            pass
        self._process = None


@contextmanager
def workspace_mcp(root: Path, token: str) -> Iterator[WorkspaceMcp]:
    root.mkdir(parents=True, exist_ok=True)
    server = WorkspaceMcp(root, token)
    server.start()
    try:
        yield server
    finally:
        server.stop()


def main() -> None:  # pragma: no cover - runs as its own process
    import logging

    import anyio
    import uvicorn
    from mcp.server import MCPServer
    from starlette.middleware.base import BaseHTTPMiddleware, RequestResponseEndpoint
    from starlette.requests import Request
    from starlette.responses import PlainTextResponse, Response

    logging.basicConfig(level=logging.WARNING)
    logging.getLogger("mcp").setLevel(logging.WARNING)
    state = Path(sys.argv[1])
    token = os.environ[TOKEN_ENV]
    server = MCPServer("harness", version="1.0")

    def append(name: str, entry: dict[str, Any]) -> None:
        with (state / name).open("a") as out:
            out.write(json.dumps(entry) + "\n")

    @server.tool()
    def read_file(path: str) -> str:
        """Read a file of the workspace."""
        append("calls.jsonl", {"tool": "read_file", "args": {"path": path}})
        return FILE_TEXT

    @server.tool()
    def apply_patch(patch: str) -> str:
        """Apply a unified diff to the workspace."""
        append("calls.jsonl", {"tool": "apply_patch", "args": {"patch": patch}})
        return PATCH_RESULT

    class BearerOnly(BaseHTTPMiddleware):
        async def dispatch(self, request: Request, call_next: RequestResponseEndpoint) -> Response:
            given = request.headers.get("authorization")
            if given != f"Bearer {token}":
                append("refused.jsonl", {"method": request.method, "path": request.url.path, "authorization": given})
                return PlainTextResponse("unauthorized", status_code=401)
            return await call_next(request)

    app = server.streamable_http_app()
    app.add_middleware(BearerOnly)
    web = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning"))

    async def serve() -> None:
        async with anyio.create_task_group() as tg:
            tg.start_soon(web.serve)
            while not web.started:
                await anyio.sleep(0.05)
            port = web.servers[0].sockets[0].getsockname()[1]
            (state / "port").write_text(str(port))

    anyio.run(serve)


if __name__ == "__main__":
    main()
