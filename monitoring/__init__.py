"""What Harness tells the company's monitoring: Prometheus metrics (/metrics) and
OpenTelemetry traces of runs (docs/design.md, Metrics; docs/design.md, Traces), and
the figures of the overview page (docs/design.md, Overview)."""
