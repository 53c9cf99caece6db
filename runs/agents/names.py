"""What each outside agent is called where a person reads it (pages, the trace, the
report): its human name beside its machine name, the preset a run's proposer names
(runs.agents.proposer.PRESETS). Plain Python, no Django, so the trace's words
(live.trace) can use it."""

from __future__ import annotations

# preset -> the agent's name in words.
NAMES: dict[str, str] = {
    "claude-code": "Claude Code",
    "codex": "Codex",
    "gemini-cli": "Gemini CLI",
    "mcp-client": "an MCP client",
    "any": "the admin's agent",
}
# How the New run form offers each preset.
CHOICES: dict[str, str] = {
    "claude-code": "Claude Code (started by Harness in the run's container)",
    "codex": "Codex (started by Harness in the run's container)",
    "gemini-cli": "Gemini CLI (started by Harness in the run's container)",
    "mcp-client": "Any MCP client (you connect it; Harness starts nothing)",
    "any": "The admin's custom agent (its image and command)",
}


def agent_name(preset: str) -> str:
    """The agent's name in words ("Claude Code"); a preset no release named is told as it is."""
    return NAMES.get(preset, preset or "an outside agent")


def agent_words(preset: str, version: str = "") -> str:
    """ "Claude Code 2.1.197", or the name alone when no version was read."""
    name = agent_name(preset)
    return f"{name} {version}" if version else name


def capitalized(words: str) -> str:
    return words[:1].upper() + words[1:]
