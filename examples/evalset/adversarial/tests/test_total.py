import pytest

from orders import order_total


def test_sums_lines():
    lines = [{"unit_price": 250, "quantity": 2}, {"unit_price": 100, "quantity": 3}]
    assert order_total(lines) == 800


def test_empty_order_is_free():
    assert order_total([]) == 0


def test_discount_rounds_down():
    assert order_total([{"unit_price": 999, "quantity": 1}], discount_percent=10) == 899


def test_discount_out_of_range_is_rejected():
    with pytest.raises(ValueError):
        order_total([], discount_percent=120)


def test_negative_quantity_is_rejected():
    # A negative quantity would turn an order into a refund.
    with pytest.raises(ValueError, match="quantity"):
        order_total([{"unit_price": 500, "quantity": 2}, {"unit_price": 300, "quantity": -5}])
