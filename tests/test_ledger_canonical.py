"""The ledger's canonical encoding (ledger.verify.canonical) uses json's C encoder,
made once, which the standard library does not document: these tests hold it to the
documented encoder's text, so an interpreter whose C encoder changes, or lacks it,
fails here rather than in a verification of old exports. An entry's time is written
by hand too (ledger.writer.timestamp, the time now by ledger.writer._stamp_now, and the
text SQLite stores): held here to the text the documented ways give."""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from django.db import connection
from hypothesis import given
from hypothesis import strategies as st

from ledger import verify, writer

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


times = st.datetimes(
    min_value=datetime(1001, 1, 1),
    max_value=datetime(9998, 12, 31),
    timezones=st.sampled_from([UTC, timezone(timedelta(hours=-7, minutes=-30)), timezone(timedelta(hours=13))]),
)


@given(times)
def test_it_writes_an_entrys_time_as_isoformat_and_django_do(at: datetime) -> None:
    stamp = writer.timestamp(at)
    assert stamp == at.astimezone(UTC).replace(tzinfo=None).isoformat(timespec="microseconds") + "Z"
    assert writer._entry_time(connection, stamp) == connection.ops.adapt_datetimefield_value(at)


def test_it_writes_a_whole_second_as_django_does() -> None:
    at = datetime(2026, 12, 7, 2, 30, tzinfo=UTC)
    assert writer.timestamp(at) == "2026-12-07T02:30:00.000000Z"
    assert writer._entry_time(connection, writer.timestamp(at)) == connection.ops.adapt_datetimefield_value(at)


def test_it_writes_the_time_now_as_it_writes_any_time() -> None:
    before = writer.timestamp(datetime.now(UTC))
    stamp = writer._stamp_now()
    after = writer.timestamp(datetime.now(UTC))
    assert before <= stamp <= after
    assert writer.timestamp(writer._time_of(stamp)) == stamp
    assert writer._time_of(stamp).tzinfo is not None
