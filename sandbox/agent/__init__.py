"""The container an outside agent (Claude Code, Codex, Gemini CLI, any agent: issue 41)
runs in, one per run, and its image (sandbox/agent/image)."""
