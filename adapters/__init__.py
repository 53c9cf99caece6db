"""Model adapters: proposers that ask a real language model for the next tool call.

What the providers share: ``conversation`` (the proposer base and its durable
conversation), ``context`` (the system prompt, the task message, untrusted-output
labelling), ``summaries`` (large outputs cut down), ``feedback`` (the harness's answer
to a proposal as a tool result), ``calls`` (tool calls, results and replies),
``pricing`` (prices, budgets, usage) and ``retries`` (model errors and backoff).
``openai_adapter`` and ``anthropic_adapter`` speak each provider's wire format through
its official client.
Plain Python, no Django: ``runs.proposers`` builds them from settings.

Nothing is imported here so that importing the package does not import the clients."""
