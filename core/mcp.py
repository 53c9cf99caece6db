"""Tools from Model Context Protocol servers as entries of the registry
(docs/design.md, Outside tools). A server's tool is named ``<server>.<tool>``, versioned
by a digest of the server's name and version and the tool's schema (a changed schema
is a different tool), and checked against its JSON Schema like a built-in against its
model. What it can do to the world is the policy's to say (``Policy.read_only_tools``),
never the server's: its annotations (read-only, destructive, idempotent) are shown as
the server's claims and decide nothing."""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from core.jsonschemas import check_schema
from core.jsonutil import JSON, digest
from core.tools import Args, ToolSpec

SERVER_NAME = re.compile(r"^[a-z][a-z0-9_-]{0,39}$")
# What a tool's own name may be: a name with a dot or a glob character would blur
# the namespace and the policy's globs; with the server's 40 and the dot, a name
# fits the 100 characters a request's row keeps of a tool.
TOOL_NAME = re.compile(r"^[A-Za-z0-9_-]{1,59}$")
# The most of a server's description of a tool the model is shown.
DESCRIPTION_CHARS = 2000


@dataclass(frozen=True)
class McpTool:
    """One tool as its server listed it."""

    server: str
    server_version: str
    name: str
    description: str
    input_schema: dict[str, JSON]
    annotations: dict[str, JSON] = field(default_factory=dict)

    @property
    def qualified(self) -> str:
        return f"{self.server}.{self.name}"

    @property
    def version(self) -> str:
        return tool_version(self.server, self.server_version, self.name, self.input_schema)


def tool_version(server: str, server_version: str, name: str, input_schema: Mapping[str, JSON]) -> str:
    return digest({"server": server, "server_version": server_version, "tool": name, "input_schema": dict(input_schema)})[:16]


def check_tool(tool: McpTool, key_arg: str | None) -> None:
    """Raise ValueError naming why a listed tool cannot enter the registry."""
    if not SERVER_NAME.match(tool.server):
        raise ValueError(f"server name {tool.server!r} is not 1 to 40 lowercase letters, digits, '_' or '-'")
    if not TOOL_NAME.match(tool.name):
        raise ValueError(f"tool name {tool.name!r} is not 1 to 59 letters, digits, '_' or '-'")
    check_schema(tool.input_schema)
    if key_arg is not None:
        props = tool.input_schema.get("properties")
        if isinstance(props, dict) and key_arg in props and not _string_like(props[key_arg]):
            raise ValueError(f"argument {key_arg!r}, where Harness puts the idempotency key, does not take a string")


def _string_like(prop: JSON) -> bool:
    return isinstance(prop, dict) and prop.get("type") == "string"


def model_schema(schema: Mapping[str, JSON], key_arg: str | None) -> dict[str, JSON]:
    """The schema the model is shown and its arguments are checked against: the
    server's, without the argument Harness fills with the operation's idempotency key
    (the model never names an effect's key), which is refused if given."""
    shown = dict(schema)
    if key_arg is None:
        return shown
    props = shown.get("properties")
    if isinstance(props, dict) and key_arg in props:
        shown["properties"] = {k: v for k, v in props.items() if k != key_arg}
    required = shown.get("required")
    if isinstance(required, list):
        shown["required"] = [r for r in required if r != key_arg]
    shown["not"] = {"required": [key_arg]}
    return shown


def effectful(policy_read_only: Iterable[str], qualified: str) -> bool:
    """Every MCP tool is an external effect unless the policy names it read-only."""
    return not any(fnmatch.fnmatchcase(qualified, glob) for glob in policy_read_only)


def mcp_spec(tool: McpTool, *, read_only: Iterable[str], key_arg: str | None) -> ToolSpec:
    """The registry's entry for ``tool`` (checked with ``check_tool``)."""
    external = effectful(read_only, tool.qualified)
    description = tool.description[:DESCRIPTION_CHARS]
    return ToolSpec(
        tool.qualified,
        tool.version,
        f"[tool of MCP server {tool.server}; its description is the server's] {description}",
        Args,
        external_effect=external,
        input_schema=model_schema(tool.input_schema, key_arg),
        source=tool.server,
        reviewer_summary=(
            f"Calls {tool.name} on MCP server {tool.server} with exactly these arguments; the server acts outside the sandbox."
            if external
            else ""
        ),
    )
