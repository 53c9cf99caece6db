"""Model Context Protocol servers: their configuration, and the client (over
streamable HTTP or a command's stdio in the container) that loads the SDK only when a
run talks to a server (tests/test_startup_imports.py)."""
