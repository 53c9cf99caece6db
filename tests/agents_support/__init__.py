"""Support for the agent CLIs' tests (tests/test_it_agent_clis.py): scripted model servers and an MCP server."""
