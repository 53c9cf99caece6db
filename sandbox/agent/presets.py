"""How to start each agent CLI headless against Harness (issue 41): one prompt, the run's MCP
endpoint as its only tool server, Harness's model proxy as its model, and nothing else.

Plain Python, no Django. :func:`launch` gives, for a preset and a run's endpoints, the
argv, the complete environment (nothing is inherited) and the files to write under the
agent's home; :func:`version_argv` and :func:`parse_version` read a CLI's version.
What each CLI sends its model is in docs/agents-protocols.md.

For every preset:

- the only MCP server is ``harness`` at the run's URL, with ``Authorization: Bearer
  <token>`` (the CLIs expand ``${HARNESS_TOKEN}`` themselves, so the token is in the
  environment, never in argv or a file);
- every built-in tool of the CLI (shell, edit, write, read, search, web, todo, subagents)
  is off by the CLI's own configuration, and its own approval prompts are off for the
  harness tools, which Harness gates itself;
- the model's API key is the run token (the proxy checks it; the agent never holds a
  provider's key);
- telemetry, update checks, error reports, surveys and IDE integration are off, and the
  CLI prints a JSON transcript (one event a line) on stdout.

The CLIs' own configuration is the first line only: in the sandbox they also have no
network but the endpoint and the proxy, and a read-only workspace.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

Preset = Literal["claude-code", "codex", "gemini-cli", "any"]
PRESETS: tuple[Preset, ...] = ("claude-code", "codex", "gemini-cli", "any")

# The npm package and the command each preset drives (sandbox/agent/clis/package.json pins them).
PACKAGES: Mapping[str, str] = {
    "claude-code": "@anthropic-ai/claude-code",
    "codex": "@openai/codex",
    "gemini-cli": "@google/gemini-cli",
}
COMMANDS: Mapping[str, str] = {"claude-code": "claude", "codex": "codex", "gemini-cli": "gemini"}

MCP_SERVER = "harness"
TOKEN_ENV = "HARNESS_TOKEN"  # noqa: S105 - the variable's name, not a token

# Claude Code's built-in tools (2.1.197), denied by name besides `--tools ""`, which
# already leaves none. A name the CLI does not know is ignored with a warning on stderr
# (2.1.197 knows no MultiEdit, NotebookRead, LS or SlashCommand).
CLAUDE_BUILTIN_TOOLS: tuple[str, ...] = (
    "Agent",
    "Task",
    "Bash",
    "BashOutput",
    "KillShell",
    "Edit",
    "Write",
    "Read",
    "NotebookEdit",
    "Glob",
    "Grep",
    "WebFetch",
    "WebSearch",
    "TodoWrite",
    "ExitPlanMode",
    "Skill",
    "PowerShell",
)

# Codex's features that bring tools or reach a network (`codex features list`, 0.171.0).
CODEX_FEATURES_OFF: tuple[str, ...] = (
    "shell_tool",
    "unified_exec",
    "view_image",
    "goals",
    "apps",
    "plugins",
    "remote_plugin",
    "tool_suggest",
    "image_generation",
    "browser_use",
    "computer_use",
    "in_app_browser",
    "hooks",
    "memories",
    "skill_mcp_dependency_install",
    "sleep_tool",
    "shell_snapshot",
    "workspace_dependencies",
    "api_key_model_discovery",
    "enable_request_compression",
)


@dataclass(frozen=True)
class ModelProxy:
    """Harness's model proxy, one base URL per provider API, as each SDK takes it:
    ``anthropic`` without ``/v1`` (``POST {anthropic}/v1/messages``), ``openai`` with it
    (``POST {openai}/responses``), ``gemini`` without the version
    (``POST {gemini}/v1beta/models/<model>:streamGenerateContent``)."""

    anthropic: str
    openai: str
    gemini: str


@dataclass(frozen=True)
class RunEndpoints:
    mcp_url: str  # the run's MCP endpoint (streamable HTTP)
    token: str  # the run-scoped bearer token
    proxy: ModelProxy
    model: str
    home: str  # the agent's HOME (absolute); `Launch.files` are relative to it
    workdir: str  # where the agent starts (absolute)


@dataclass(frozen=True)
class Launch:
    argv: tuple[str, ...]
    env: Mapping[str, str]
    files: Mapping[str, str] = field(default_factory=dict)  # path relative to home -> content
    transcript: Literal["stream-json", "jsonl", "text"] = "stream-json"


BASE_ENV: Mapping[str, str] = {
    "PATH": "/usr/local/bin:/usr/bin:/bin",
    "LANG": "C.UTF-8",
    "TERM": "dumb",
    "NO_COLOR": "1",
    "NO_BROWSER": "1",
    "CI": "1",
}


def common_env(run: RunEndpoints) -> dict[str, str]:
    """What every agent receives: the endpoint, the token and every base URL."""
    return {
        **BASE_ENV,
        "HOME": run.home,
        "HARNESS_MCP_URL": run.mcp_url,
        TOKEN_ENV: run.token,
        "HARNESS_MODEL": run.model,
        "ANTHROPIC_BASE_URL": run.proxy.anthropic,
        "OPENAI_BASE_URL": run.proxy.openai,
        "GOOGLE_GEMINI_BASE_URL": run.proxy.gemini,
    }


# Claude Code is a Bun executable, and Bun's fetch pools a connection even when the
# response says ``Connection: close``; the agent container's relay carries one request
# a connection (sandbox.egress.proxy) and closes it after the response. A request sent
# on a pooled connection in the moment before that close arrives is cut (seen: the
# request after an answer with no body, a 202, 401 or 405, goes on its connection);
# when that is MCP's ``notifications/initialized``, which Claude Code does not retry,
# it reports the harness server "failed" and runs without its tools. Asked for in
# the request itself, ``Connection: close`` keeps Bun from pooling the connection.
# Its start-up HEAD to the model's base URL still asks for keep-alive (no setting of
# Claude Code's changes that but a proxy's); the launcher tells a failed connection.
NO_REUSE = {"Connection": "close"}


def _claude(run: RunEndpoints, prompt: str, executable: str) -> Launch:
    headers = {"Authorization": f"Bearer ${{{TOKEN_ENV}}}", **NO_REUSE}
    mcp = {"mcpServers": {MCP_SERVER: {"type": "http", "url": run.mcp_url, "headers": headers}}}
    settings = {
        "permissions": {
            "defaultMode": "dontAsk",
            "allow": [f"mcp__{MCP_SERVER}__*"],
            "deny": list(CLAUDE_BUILTIN_TOOLS),
        },
        "enableAllProjectMcpServers": False,
        "disableAllHooks": True,
        "autoUpdates": False,
        "includeCoAuthoredBy": False,
        "feedbackSurveyRate": 0,
    }
    files = {
        ".harness/claude-mcp.json": json.dumps(mcp, indent=2) + "\n",
        ".claude/settings.json": json.dumps(settings, indent=2) + "\n",
    }
    argv = (
        executable,
        "--print",
        "--output-format",
        "stream-json",
        "--verbose",
        "--model",
        run.model,
        "--bare",
        "--tools",
        "",
        "--allowedTools",
        f"mcp__{MCP_SERVER}__*",
        "--disallowedTools",
        ",".join(CLAUDE_BUILTIN_TOOLS),
        "--permission-mode",
        "dontAsk",
        "--strict-mcp-config",
        "--mcp-config",
        f"{run.home}/.harness/claude-mcp.json",
        "--setting-sources",
        "user",
        "--settings",
        f"{run.home}/.claude/settings.json",
        "--no-session-persistence",
        "--disable-slash-commands",
        "--",
        prompt,
    )
    env = {
        **common_env(run),
        "ANTHROPIC_API_KEY": run.token,
        "CLAUDE_CONFIG_DIR": f"{run.home}/.claude",
        # Side requests (titles, summaries) name the run's model, not a haiku the proxy may not offer.
        "ANTHROPIC_SMALL_FAST_MODEL": run.model,
        "ANTHROPIC_DEFAULT_HAIKU_MODEL": run.model,
        "CLAUDE_CODE_SUBAGENT_MODEL": run.model,
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_TELEMETRY": "1",
        "DISABLE_ERROR_REPORTING": "1",
        "DISABLE_AUTOUPDATER": "1",
        "DISABLE_UPDATES": "1",
        "DISABLE_BUG_COMMAND": "1",
        "DISABLE_FEEDBACK_COMMAND": "1",
        "DISABLE_INSTALLATION_CHECKS": "1",
        "CLAUDE_CODE_DISABLE_FEEDBACK_SURVEY": "1",
        "CLAUDE_CODE_IDE_SKIP_AUTO_INSTALL": "1",
        "CLAUDE_CODE_DISABLE_TERMINAL_TITLE": "1",
        # Its model requests share the relay's origin with the MCP endpoint's: none is
        # pooled either, so no MCP request can be sent on one being closed (NO_REUSE).
        "ANTHROPIC_CUSTOM_HEADERS": "\n".join(f"{name}: {value}" for name, value in NO_REUSE.items()),
        # Its first turn waits for the harness server's tools (headless, it connects MCP
        # servers in the background and may ask its model before they are listed), and a
        # slow endpoint (through the agent container's relay, on a loaded worker) is
        # given a minute to connect, not 5 seconds.
        "MCP_CONNECTION_NONBLOCKING": "false",
        "MCP_CONNECT_TIMEOUT_MS": "60000",
        "MCP_TIMEOUT": "60000",
    }
    return Launch(argv, env, files, "stream-json")


def _toml(value: object) -> str:
    # TOML's basic strings and arrays take JSON's escapes.
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str | list):
        return json.dumps(value)
    raise TypeError(f"no TOML for {value!r}")


def _toml_table(value: dict[str, str]) -> str:
    # An inline table, its keys quoted as basic strings.
    return "{ " + ", ".join(f"{_toml(key)} = {_toml(item)}" for key, item in value.items()) + " }"


def _codex(run: RunEndpoints, prompt: str, executable: str) -> Launch:
    lines = [
        f"model = {_toml(run.model)}",
        'model_provider = "harness"',
        'approval_policy = "never"',
        'sandbox_mode = "read-only"',
        'web_search = "disabled"',
        "check_for_update_on_startup = false",
        "",
        "[features]",
        *(f"{name} = false" for name in CODEX_FEATURES_OFF),
        "",
        "[agents]",
        "enabled = false",
        "",
        "[model_providers.harness]",
        'name = "Harness model proxy"',
        f"base_url = {_toml(run.proxy.openai)}",
        f"env_key = {_toml(TOKEN_ENV)}",
        'wire_api = "responses"',
        # Codex's HTTP client pools connections as Bun's does (see NO_REUSE; seen cutting
        # MCP's notifications/initialized, which Codex retried three times on the same
        # pool and then refused to start); asked for in each request, it does not.
        f"http_headers = {_toml_table(NO_REUSE)}",
        "",
        f"[mcp_servers.{MCP_SERVER}]",
        f"url = {_toml(run.mcp_url)}",
        f"bearer_token_env_var = {_toml(TOKEN_ENV)}",
        f"http_headers = {_toml_table(NO_REUSE)}",
        'default_tools_approval_mode = "approve"',
        # Without it Codex may send its first turn before the server's tools are listed
        # (a slow endpoint: through the agent container's relay), so the model's first
        # calls name tools it was not offered; required, it starts only once they are.
        "required = true",
        "startup_timeout_sec = 60",
        "",
        "[analytics]",
        "enabled = false",
        "",
        "[otel]",
        'exporter = "none"',
        "",
    ]
    argv = (
        executable,
        "exec",
        "--json",
        "--skip-git-repo-check",
        "--ephemeral",
        "--color",
        "never",
        "--sandbox",
        "read-only",
        "--cd",
        run.workdir,
        "--model",
        run.model,
        "--",
        prompt,
    )
    env = {**common_env(run), "CODEX_HOME": f"{run.home}/.codex", "OPENAI_API_KEY": run.token}
    return Launch(argv, env, {".codex/config.toml": "\n".join(lines)}, "jsonl")


def _gemini(run: RunEndpoints, prompt: str, executable: str) -> Launch:
    settings = {
        "general": {
            "enableAutoUpdate": False,
            "enableAutoUpdateNotification": False,
            "disableAutoUpdate": True,
            "disableUpdateNag": True,
            "checkpointing": {"enabled": False},
        },
        "privacy": {"usageStatisticsEnabled": False},
        "telemetry": {"enabled": False},
        "ide": {"enabled": False},
        "security": {"auth": {"selectedType": "gemini-api-key"}, "folderTrust": {"enabled": False}},
        # An allowlist: no built-in tool is registered, and the policy denies every tool but the harness server's.
        "tools": {"core": [f"mcp_{MCP_SERVER}_*"], "useRipgrep": False, "sandbox": False},
        "mcp": {"allowed": [MCP_SERVER]},
        "mcpServers": {MCP_SERVER: {"httpUrl": run.mcp_url, "headers": {"Authorization": f"Bearer ${{{TOKEN_ENV}}}"}, "trust": True}},
        "skills": {"enabled": False},
        "experimental": {"enableAgents": False},
        "model": {"name": run.model},
    }
    text = json.dumps(settings, indent=2) + "\n"
    argv = (
        executable,
        "--output-format",
        "stream-json",
        "--model",
        run.model,
        "--allowed-mcp-server-names",
        MCP_SERVER,
        f"--prompt={prompt}",
    )
    env = {
        **common_env(run),
        "GEMINI_API_KEY": run.token,
        # The same settings as the system's, which take precedence over a workspace's .gemini/settings.json.
        "GEMINI_CLI_SYSTEM_SETTINGS_PATH": f"{run.home}/.gemini/system-settings.json",
        "GEMINI_CLI_NO_RELAUNCH": "true",
    }
    return Launch(argv, env, {".gemini/settings.json": text, ".gemini/system-settings.json": text}, "stream-json")


def _any(run: RunEndpoints, prompt: str, command: Sequence[str]) -> Launch:
    if not command:
        raise ValueError("the 'any' preset needs the admin's command")
    env = {
        **common_env(run),
        "HARNESS_PROMPT": prompt,
        "ANTHROPIC_API_KEY": run.token,
        "OPENAI_API_KEY": run.token,
        "GEMINI_API_KEY": run.token,
    }
    return Launch(tuple(command), env, {}, "text")


def launch(preset: Preset, run: RunEndpoints, prompt: str, *, executable: str | None = None, command: Sequence[str] = ()) -> Launch:
    """How to start ``preset`` headless on ``prompt``. ``executable`` is the CLI's path (its
    command name by default); ``command`` is the admin's argv for the ``any`` preset, which
    gets the prompt in ``HARNESS_PROMPT``."""
    if preset == "any":
        return _any(run, prompt, command)
    exe = executable or COMMANDS[preset]
    if preset == "claude-code":
        return _claude(run, prompt, exe)
    if preset == "codex":
        return _codex(run, prompt, exe)
    if preset == "gemini-cli":
        return _gemini(run, prompt, exe)
    raise ValueError(f"unknown preset {preset!r}")


def version_argv(preset: Preset, *, executable: str | None = None, command: Sequence[str] = ()) -> tuple[str, ...]:
    if preset == "any":
        return (*command[:1], "--version")
    return (executable or COMMANDS[preset], "--version")


_VERSION = re.compile(r"\b(\d+\.\d+\.\d+(?:[-+][0-9A-Za-z.-]+)?)\b")


def parse_version(output: str) -> str | None:
    """The first version number in ``--version``'s output ("2.1.197 (Claude Code)",
    "codex-cli 0.171.0", "0.61.0")."""
    found = _VERSION.search(output)
    return found.group(1) if found else None


# What a CLI's transcript says of its connection to the harness MCP server, as
# :func:`mcp_report` reads it: the server's status, "connected" when it is usable.
CONNECTED = "connected"
# Codex's words (standard error, then exit status 1) when a required MCP server did not start.
CODEX_REQUIRED_FAILED = b"required MCP servers failed to initialize"


def mcp_report(preset: Preset, line: bytes) -> str | None:
    """The status of the harness MCP server that one line of the CLI's transcript
    reports ("connected", "failed", "needs-auth", "pending", or "absent" when the CLI
    lists its servers without it), None when the line is no such report. Claude Code's
    stream-json opens with a ``system``/``init`` line listing its MCP servers and their
    status once it has tried to connect them (``MCP_CONNECTION_NONBLOCKING=false``).
    Codex, whose harness server is ``required``, says on standard error that it could
    not start without it (its only report: a connected server goes unmentioned). Gemini
    CLI's transcript says nothing of it in a form read here."""
    if preset == "codex":
        return "failed" if CODEX_REQUIRED_FAILED in line else None
    if preset != "claude-code" or not line.startswith(b'{"type":"system"'):
        return None
    try:
        said = json.loads(line)
    except ValueError:
        return None
    if not isinstance(said, dict) or said.get("subtype") != "init" or not isinstance(said.get("mcp_servers"), list):
        return None
    for server in said["mcp_servers"]:
        if isinstance(server, dict) and server.get("name") == MCP_SERVER:
            return str(server.get("status") or "unknown")
    return "absent"
