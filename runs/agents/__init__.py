"""External agents (Claude Code, Codex, Gemini CLI, any MCP client) as a run's proposer:
the run-scoped token they hold, and the bridge between the run's MCP endpoint
(gateway.mcp_endpoint) and the worker that drives the run."""
