"""Egress for checks: the proxy in the worker that admits or refuses each connection
against the policy's destinations, and the relay inside the container that carries
them to it."""
