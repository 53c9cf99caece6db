"""What Harness tells the company's monitoring: Prometheus metrics (/metrics) and
OpenTelemetry traces of runs (docs/design.md, Metrics and Traces)."""
