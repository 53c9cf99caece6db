"""What an external agent reaches over HTTP, under /agent/runs/<run id>/: the run's MCP
endpoint and the model proxy, each opened by the run's token (runs.agents.tokens) and
nothing else. Plain ASGI beside the Django app (harness_site.asgi), so a call waiting
for a reviewer holds no worker thread."""
