"""A read-only search over the run's workspace as an MCP server over stdio, written with
the official SDK, for tests/test_mcp_stdio.py. It is trusted configuration, not
workspace content: the test puts it in the sandbox image beside the SDK, and the
admin's McpServer row names it as the command run in each run's container."""

from __future__ import annotations

from pathlib import Path

from mcp.server import MCPServer
from mcp_types import ToolAnnotations

ROOT = Path("/workspace")
MAX_HITS = 50

server = MCPServer("search", version="1.0")


@server.tool(annotations=ToolAnnotations(readOnlyHint=True))
def find(text: str) -> dict[str, object]:
    """The workspace's lines that contain ``text``: path, line number and the line."""
    hits: list[dict[str, object]] = []
    for path in sorted(ROOT.rglob("*")):
        if ".git" in path.parts or not path.is_file():
            continue
        try:
            lines = path.read_text(errors="replace").splitlines()
        except OSError:
            continue
        for number, line in enumerate(lines, 1):
            if text in line and len(hits) < MAX_HITS:
                hits.append({"path": str(path.relative_to(ROOT)), "line": number, "text": line[:200]})
    return {"hits": hits}


@server.tool(annotations=ToolAnnotations(readOnlyHint=True))
def interfaces() -> dict[str, object]:
    """The network interfaces the server sees (what its container can reach) and the
    kernel it runs on (gVisor's own under runsc)."""
    return {"interfaces": sorted(p.name for p in Path("/sys/class/net").iterdir()), "kernel": Path("/proc/version").read_text()}


@server.tool(annotations=ToolAnnotations(readOnlyHint=True))
def flood(megabytes: int) -> str:
    """An answer of ``megabytes`` MB: what the byte cap must cut off."""
    return "x" * (megabytes * 2**20)


if __name__ == "__main__":
    server.run("stdio")
