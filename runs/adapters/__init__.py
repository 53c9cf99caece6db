"""Model adapters: proposers that ask a real language model for the next tool call.

``conversation`` holds what the providers share (context, untrusted-output labelling,
summaries, budgets, retries, the durable conversation); ``openai_adapter`` and
``anthropic_adapter`` speak each provider's wire format through its official client.
Plain Python, no Django: ``runs.proposers`` builds them from settings.

Nothing is imported here so that importing the package does not import the clients."""
