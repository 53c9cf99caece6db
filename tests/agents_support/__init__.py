"""Support for the agent tests: scripted model servers and an MCP server for the CLIs' tests (tests/test_agent_clis.py), provider doubles for the model proxy's (tests/test_model_proxy.py)."""
