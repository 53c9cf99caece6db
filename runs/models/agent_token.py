from django.db import models


class AgentToken(models.Model):
    """The credential an external agent holds for one run (runs.agents.tokens): it
    reaches that run's MCP endpoint and model proxy and nothing else. Only the
    SHA-256 of the token is kept; the token itself lives in the agent's container."""

    run = models.ForeignKey("runs.Run", on_delete=models.CASCADE, related_name="agent_tokens")
    digest = models.CharField(max_length=64, unique=True)
    created_at = models.DateTimeField(auto_now_add=True)
    # Set when a newer token replaces it (the run moved to another worker) or the
    # agent's container ended: a token outliving its agent opens nothing.
    revoked_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"agent token of run {self.run_id}"
