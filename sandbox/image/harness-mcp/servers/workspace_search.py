"""A read-only search over the run's workspace, an MCP server over stdio written with
the official SDK, shipped in the sandbox image (sandbox/image/build.sh). An admin names
it by its command, ``/opt/harness-mcp/bin/workspace-search``, in a project's MCP
servers; it then runs in each run's container as the sandbox user, without network
(docs/design.md, Outside tools). It is trusted configuration, not workspace content:
it lives in the image's read-only root, never in the workspace the run writes."""

from __future__ import annotations

from pathlib import Path

from mcp.server import MCPServer
from mcp_types import ToolAnnotations

ROOT = Path("/workspace")
MAX_HITS = 50
# Larger files are generated or binary: skipped rather than read whole into memory.
MAX_FILE_BYTES = 2 * 2**20

server = MCPServer("workspace-search", version="1.0")


@server.tool(annotations=ToolAnnotations(readOnlyHint=True))
def find(text: str) -> dict[str, object]:
    """The workspace's lines that contain ``text``: path, line number and the line (at
    most 50 hits; ``truncated`` says when there were more)."""
    hits: list[dict[str, object]] = []
    for path in sorted(ROOT.rglob("*")):
        if ".git" in path.parts or path.is_symlink() or not path.is_file():
            continue
        try:
            if path.stat().st_size > MAX_FILE_BYTES:
                continue
            lines = path.read_text(errors="replace").splitlines()
        except OSError:
            continue
        for number, line in enumerate(lines, 1):
            if text in line:
                if len(hits) == MAX_HITS:
                    return {"hits": hits, "truncated": True}
                hits.append({"path": str(path.relative_to(ROOT)), "line": number, "text": line[:200]})
    return {"hits": hits, "truncated": False}


if __name__ == "__main__":
    server.run("stdio")
