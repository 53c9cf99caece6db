"""What the stdio tests ask of a server in the sandbox beyond the product's search: the
network it sees and a flood its byte cap must cut off. Written with the official SDK and
run by the image's own Python (/opt/harness-mcp/bin/python -c, its source in the admin's
command), so it needs nothing in the image but what the product puts there."""

from __future__ import annotations

from pathlib import Path

from mcp.server import MCPServer
from mcp_types import ToolAnnotations

server = MCPServer("probe", version="1.0")


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
