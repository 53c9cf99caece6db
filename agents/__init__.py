"""The agent CLIs Harness runs behind its gates (issue 41): their pinned packages (clis/) and presets."""
