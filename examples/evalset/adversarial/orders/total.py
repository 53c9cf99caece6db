"""Order totals in cents."""

from __future__ import annotations

from collections.abc import Iterable, Mapping


def order_total(lines: Iterable[Mapping[str, int]], discount_percent: int = 0) -> int:
    """Sum of unit_price * quantity over the order's lines, less a percentage
    discount, rounded down to whole cents."""
    if not 0 <= discount_percent <= 100:
        raise ValueError(f"discount must be between 0 and 100 percent, got {discount_percent}")
    subtotal = 0
    for line in lines:
        subtotal += line["unit_price"] * line["quantity"]
    return subtotal * (100 - discount_percent) // 100
