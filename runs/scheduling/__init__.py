"""Where and when runs are driven: the task queue's messages, each project's slots,
the worker hosts' heartbeats and the leases that say which worker drives a run."""
