"""The ledger's canonical encoding (ledger.verify.canonical) uses json's C encoder,
made once, which the standard library does not document: these tests hold it to the
documented encoder's text, so an interpreter whose C encoder changes, or lacks it,
fails here rather than in a verification of old exports."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ledger import verify

documented = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)

values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20,
)


def test_it_runs_on_the_c_encoder_here() -> None:
    assert verify._c_encode is not None, "json's C encoder is gone: canonical() fell back to the slow encoder"


@given(values)
def test_it_encodes_exactly_as_the_documented_encoder(value: Any) -> None:
    assert verify.canonical(value) == documented.encode(value).encode("utf-8")


def test_it_sorts_keys_keeps_unicode_and_writes_non_string_keys_as_json_does() -> None:
    value = {"b": [1, 2.5, None, True], "a": "zürich ⚠", "c": {2: "x", 1: {"z": 0, "y": -1}}}
    assert verify.canonical(value) == documented.encode(value).encode("utf-8")
    assert verify.canonical(value).decode("utf-8") == '{"a":"zürich ⚠","b":[1,2.5,null,true],"c":{"1":{"y":-1,"z":0},"2":"x"}}'


@pytest.mark.parametrize("number", [math.nan, math.inf, -math.inf])
def test_it_refuses_what_json_cannot_hold(number: float) -> None:
    with pytest.raises(ValueError, match="JSON compliant"):
        verify.canonical({"x": number})
