"""Masking scans only the pieces of a JSON text it has not seen clean before
(``common.secret_detector.CleanPieces``), and answers exactly what a scan of the
whole text answers: texts are built from the fragments every rule reads (names,
assignments, quotes, commas, prefixes, URLs, random values, a configured value and
its halves) and from the separators the pieces are cut at, one after another through
the same remembered pieces."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from common.redact import MaskedHead, masked_text
from common.secret_detector import CleanPieces, might_hold

VALUE = "configured-value,7d1e"  # a comma in it, as a cut at commas alone would break
FRAGMENTS = (
    '"',
    ",",
    ',"',
    ":",
    "=",
    " ",
    "\t",
    "\\",
    "'",
    "{",
    "}",
    "@",
    "://",
    "https://user",
    "pa,ss",
    "word1234@",
    "token",
    "API_KEY",
    "client_secret",
    "password",
    "aws",
    "AKIA",
    "ABCDEFGHIJKLMNOP",
    "sk-",
    "ghp_",
    "eyJ",
    "-----BEGIN",
    "Zx9Qm2Lp7Rt4Vw8Ab3Cd",
    "deadbeef0123456789",
    "abc",
    "é",
    VALUE,
    VALUE[:16],
    VALUE[16:],
)
pieces = st.lists(st.sampled_from(FRAGMENTS), max_size=12).map("".join)


@st.composite
def sequences(draw: st.DrawFn) -> list[str]:
    """Texts that share pieces, some joined at the pieces' separator, some not."""
    shared = draw(st.lists(pieces, min_size=1, max_size=6))
    chosen = st.lists(st.sampled_from(shared), min_size=1, max_size=6)
    joined = st.builds(lambda parts, sep: sep.join(parts), chosen, st.sampled_from([',"', ',"', ",", '"']))
    return draw(st.lists(joined | pieces, min_size=1, max_size=8))


@settings(max_examples=300, deadline=None)
@given(sequences(), st.sampled_from([[], [VALUE], ['has"quote']]))
def test_it_answers_as_a_scan_of_the_whole_text(sequence: list[str], values: list[str]) -> None:
    clean = CleanPieces(values, shortest=0)
    for text in sequence:
        assert clean.might_hold(text) is might_hold(text, values), text


@pytest.mark.parametrize(
    ("seen", "text"),
    [
        # A name and its value in pieces of their own, and together.
        (['{"name":"token","value":"Zx9Qm2Lp7Rt4Vw8Ab3Cd","tail":1}'], '{"token":"Zx9Qm2Lp7Rt4Vw8Ab3Cd","tail":1}'),
        # A configured value and a URL's password across a comma, each side seen alone.
        (['{"a":"configured-value,"x":1}', '{"b":7d1e","tail":1}'], '{"a":"configured-value,7d1e","tail":1}'),
        (['{"a":"https://user:pa,"x":1}', '{"b":ss1234@host","tail":1}'], '{"a":"https://user:pa,ss1234@host","tail":1}'),
    ],
)
def test_it_finds_what_pieces_seen_clean_make_together(seen: list[str], text: str) -> None:
    clean = CleanPieces([VALUE], shortest=0)
    assert not any(clean.might_hold(earlier) for earlier in seen)
    assert clean.might_hold(text)
    assert masked_text(text, [VALUE]).text != text


def test_it_masks_a_long_state_whose_edit_joins_pieces_seen_clean() -> None:
    """What a checkpoint takes: a state long enough to be cut, seen clean before."""
    rest = "".join(f',"field{n}":{n}' for n in range(60)) + "}"
    assert masked_text('{"a":"configured-value,"x":1' + rest, [VALUE]).text == '{"a":"configured-value,"x":1' + rest
    assert masked_text('{"b":7d1e","y":1' + rest, [VALUE]).text == '{"b":7d1e","y":1' + rest
    assert masked_text('{"a":"configured-value,7d1e","y":1' + rest, [VALUE]).text == '{"a":"[redacted]","y":1' + rest


# Short ones are scanned whole, long ones (60 fields more) in pieces.
json_objects = st.builds(
    lambda value, long: json.dumps(
        {**value, **({f"field{n}": n for n in range(60)} if long else {})}, ensure_ascii=False, separators=(",", ":")
    ),
    st.dictionaries(pieces, pieces, min_size=1, max_size=4),
    st.booleans(),
)


@settings(max_examples=200, deadline=None)
@given(json_objects, st.lists(st.tuples(json_objects, st.sampled_from([[], [VALUE], [VALUE[:16]], ['has"quote']])), min_size=1, max_size=5))
def test_it_masks_a_kept_head_as_the_whole_text(head_object: str, rests: list[tuple[str, list[str]]]) -> None:
    """``MaskedHead``: the head scanned once per set of secrets, the rest each time,
    gives what masking the whole text gives, whatever the secrets were before."""
    head = MaskedHead(head_object[:-1] + ",")
    for rest_object, values in rests:
        rest = rest_object[1:]
        assert head.masked(rest, values).text == masked_text(head.head + rest, values).text, (head.head, rest, values)


def test_it_scans_a_kept_head_again_when_the_secrets_change() -> None:
    head = MaskedHead('{"objective":"deploy with ' + VALUE + '",')
    rest = '"field":1}'
    assert head.masked(rest, []).text == head.head + rest
    assert head.masked(rest, [VALUE]).text == '{"objective":"deploy with [redacted]","field":1}'
    assert head.masked(rest, []).text == head.head + rest
