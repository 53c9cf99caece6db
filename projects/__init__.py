"""Projects: each team's runs, and who may see, decide and operate them, are its own
(docs/design.md, Trust boundaries)."""
