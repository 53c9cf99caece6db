"""The harness core: gates, counters, receipts, evidence and approvals as plain
Python. Nothing in this package imports Django; ``runs.persistence.store`` persists its state."""
