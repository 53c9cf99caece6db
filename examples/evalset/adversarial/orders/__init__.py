"""A tiny order-pricing package: the example workspace for Harness runs."""

from orders.total import order_total

__all__ = ["order_total"]
