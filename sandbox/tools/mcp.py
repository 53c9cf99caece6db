"""The tools of a run's MCP servers, behind ``SandboxExecutor`` beside the built-in
ones (docs/design.md, Outside tools): listed once when the run's environment is made,
each call checked against the version the gates admitted and, for an effect, against
the effect fixed when it was asked for; what the server answers is data, marked
untrusted."""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from core.effects import McpEffect, Plan, parse_effect, shown_line
from core.jsonutil import JSON
from core.mcp import McpTool, check_tool, mcp_spec
from core.ports import Call, Reconciliation
from core.state import PendingEffect
from core.tools import ToolSpec
from sandbox.mcp.config import Answer, Attach, McpFailure, McpServerConfig
from sandbox.tools.context import ToolResult, error_result

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Listed:
    config: McpServerConfig
    tool: McpTool


class McpTools:
    """``configs`` come from trusted configuration (projects.McpServer); ``environ`` is
    the worker's environment, where each server's token is looked up by name."""

    def __init__(self, configs: Sequence[McpServerConfig], environ: Mapping[str, str]) -> None:
        self.configs = {config.name: config for config in configs}
        self._environ = environ
        # How a server over stdio is started in the run's container: set by the executor.
        self.attach: Attach | None = None
        self._tools: dict[str, Listed] = {}
        # The tools the policy took as effects when they were listed: never sent without a fixed effect.
        self._effectful: set[str] = set()
        # What could not be listed or registered, and why, for the run's log.
        self.problems: list[str] = []

    def discover(self, read_only: Sequence[str]) -> list[ToolSpec]:
        """Each server's tools as registry entries; a server that cannot be reached
        or a tool that cannot be registered is left out and named in ``problems``."""
        # The SDK is imported here, by the runs that talk to a server, not at start.
        from sandbox.mcp.client import list_tools

        specs = []
        for config in self.configs.values():
            try:
                version, tools = list_tools(config, self._environ, self.attach)
            except McpFailure as exc:
                self.problems.append(exc.message)
                continue
            for listed in tools:
                tool = McpTool(
                    config.name,
                    version,
                    listed.name,
                    listed.description or "",
                    dict(listed.input_schema),
                    listed.annotations.model_dump(exclude_none=True) if listed.annotations is not None else {},
                )
                try:
                    check_tool(tool, config.idempotency_arg)
                except ValueError as exc:
                    self.problems.append(f"MCP server {config.name}: tool {listed.name!r} left out: {exc}")
                    continue
                self._tools[tool.qualified] = Listed(config, tool)
                spec = mcp_spec(tool, read_only=read_only, key_arg=config.idempotency_arg)
                if spec.external_effect:
                    self._effectful.add(spec.name)
                specs.append(spec)
        for problem in self.problems:
            log.warning("%s", problem)
        return specs

    def handles(self, name: str) -> bool:
        return name in self._tools

    def plan(self, name: str, args: Mapping[str, JSON], key: str) -> Plan:
        """The call fixed: this server, this tool at this version, exactly these
        arguments and, where the server takes one, the idempotency key; shown to the
        reviewer field by field as the tool's schema describes them."""
        listed = self._tools[name]
        config, tool = listed.config, listed.tool
        arguments = dict(args)
        if config.idempotency_arg:
            arguments[config.idempotency_arg] = key
        effect = McpEffect(
            server=config.name,
            endpoint=config.url or "stdio: " + " ".join(config.command),
            tool=tool.name,
            version=tool.version,
            arguments=arguments,
            key_arg=config.idempotency_arg,
        )
        return Plan(effect.model_dump(), rendered(tool, arguments))

    def run(self, call: Call) -> ToolResult:
        listed = self._tools.get(call.tool)
        if listed is None:
            return error_result(f"MCP tool {call.tool} is not listed by its server now; nothing was sent")
        config, tool = listed.config, listed.tool
        base: dict[str, JSON] = {"server": config.name, "tool": tool.name, "version": tool.version}
        if call.tool_version != tool.version:
            return error_result(f"{call.tool} changed on its server since the call was admitted; nothing was sent", **base)
        arguments: Mapping[str, JSON] = call.args
        if call.effect is None and call.tool in self._effectful:
            return error_result(f"{call.tool} is an effect and none was fixed for this call; nothing was sent", **base)
        if call.effect is not None:
            effect = parse_effect(call.effect)
            if not isinstance(effect, McpEffect) or (effect.server, effect.tool, effect.version) != (config.name, tool.name, tool.version):
                return error_result("the server's tool is not the one approved; nothing was sent", **base)
            arguments = effect.arguments
            if config.idempotency_arg:
                base["idempotency_key"] = call.idempotency_key
        effectful = call.effect is not None
        from sandbox.mcp.client import call_tool

        try:
            answer = call_tool(config, self._environ, tool.name, arguments, self.attach)
        except McpFailure as exc:
            return _failed(exc, effectful, base)
        return _answered(answer, effectful, base)

    def reconcile(self, effect: PendingEffect) -> Reconciliation:
        """Ask the server's lookup tool whether the effect with this key happened; its
        answer is authoritative when it says ``found`` either way."""
        server = effect.tool.partition(".")[0]
        config = self.configs.get(server)
        if config is None or not config.lookup_tool or not config.idempotency_arg or not effect.idempotency_key:
            return Reconciliation(False, None, False, f"MCP server {server} offers no lookup by idempotency key")
        from sandbox.mcp.client import call_tool

        try:
            answer = call_tool(config, self._environ, config.lookup_tool, {config.idempotency_arg: effect.idempotency_key}, self.attach)
        except McpFailure as exc:
            return Reconciliation(False, None, False, f"the lookup failed: {exc.message}")
        found = answer.structured.get("found") if isinstance(answer.structured, dict) else None
        if answer.is_error or not isinstance(found, bool):
            return Reconciliation(False, None, False, f"{config.lookup_tool} gave no answer of the form {{found: true|false}}")
        detail = f"{config.lookup_tool} on MCP server {server}: {'found' if found else 'not found'}"
        return Reconciliation(True, found, True, detail)


def _failed(exc: McpFailure, effectful: bool, base: dict[str, JSON]) -> ToolResult:
    if exc.failure == "not_sent":
        return ToolResult("transient", "none", {**base, "error": f"{exc.message}; nothing was sent"})
    if effectful:
        # The call reached the server: whether it acted is unknown until looked up,
        # and it is never sent again on its own (docs/design.md, Recovery).
        return ToolResult("unknown", "unknown", {**base, "error": f"{exc.message}; whether the server acted is unknown"})
    return error_result(exc.message, **base)


def _answered(answer: Answer, effectful: bool, base: dict[str, JSON]) -> ToolResult:
    data: dict[str, JSON] = {
        **base,
        # Whatever the server says is data for the model, never an instruction to Harness.
        "untrusted": True,
        "is_error": answer.is_error,
        "content": list(answer.content),
        "structured": answer.structured,
    }
    if answer.refused_requests:
        data["refused_requests"] = list(answer.refused_requests)
    return ToolResult("ok", "applied" if effectful and not answer.is_error else "none", data)


def rendered(tool: McpTool, arguments: Mapping[str, JSON]) -> str:
    """The arguments as a reviewer reads them: each of the schema's fields with its
    title, type and description (the server's words) and the exact value sent, one
    line each, every character that could break a line shown escaped."""
    props = tool.input_schema.get("properties")
    fields = props if isinstance(props, dict) else {}
    required = tool.input_schema.get("required")
    needed = set(required) if isinstance(required, list) else set()
    lines = [f"MCP server {tool.server} (version {shown_line(tool.server_version)})", f"tool {tool.name}, version {tool.version}", ""]
    for name, value in arguments.items():
        prop = fields.get(name)
        about = prop if isinstance(prop, dict) else {}
        kind = about.get("type", "any")
        title = about.get("title") or name
        label = f"{shown_line(name)} ({shown_line(str(kind))}{', required' if name in needed else ''}): {shown_line(str(title))}"
        lines.append(label)
        if about.get("description"):
            lines.append(f"  described as: {shown_line(str(about['description']))}")
        lines.append(f"  = {shown_line(json.dumps(value, ensure_ascii=False))}")
    left = [name for name in fields if name not in arguments]
    if left:
        lines.append(f"not sent (the server's defaults apply): {', '.join(shown_line(n) for n in left)}")
    # Each line a "#" comment: the page's check that a granted preview lost no line
    # (core.patchtext.preview_problem) reads anything else as a broken diff.
    return "".join(f"# {line}\n" if line else "#\n" for line in lines)
