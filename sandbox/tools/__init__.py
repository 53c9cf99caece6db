"""The tools a run's calls perform: the registry, file tools, checks, effects (push,
change requests, publish) and MCP tools, and the context each is given."""
