"""Projects: each team's runs, reviewers, operators, policies, sources, remotes and
budgets are its own (docs/design.md, Projects)."""
