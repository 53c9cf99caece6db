"""An outside agent (Claude Code, Codex, Gemini CLI, any agent: issue 41) in the sandbox: how
each CLI is started headless behind Harness (presets.py, its pinned packages in clis/), the
container it runs in, one per run, and its image (image/)."""
