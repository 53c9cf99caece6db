"""Storable JSON: what a value from outside (a proposal, a tool's output, a run's
configuration) must be before anything holding it is checkpointed, so that every
database takes it and every reader reads it back (docs/design.md, Recovery).

A storable value is JSON (objects with text keys, lists, text, finite numbers,
booleans, null) whose text is valid Unicode without NUL (PostgreSQL's text and jsonb
refuse U+0000; UTF-8 has no lone surrogates, which a non-UTF-8 file name decodes to),
nested at most ``MAX_DEPTH`` levels (pydantic's encoder gives up near 255 levels,
Python's near 1,000, and the run state holds a value a few levels down) and at most
``max_bytes`` long as UTF-8 JSON. Every walk here is iterative, so a value nested
100,000 levels is refused like one nested 65.

``problems`` names what is wrong and where; ``escaped`` makes tool output storable
by writing a NUL or a lone surrogate as the escape Python would show for the byte
(``\\x00``, ``\\xe9``); ``summary`` is what is kept of input that is refused: its
size, digest and head, bounded whatever the input's size."""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Iterator
from typing import Any

from pydantic import BaseModel, ConfigDict

from core.errors import FieldProblem
from core.jsonutil import JSON

MAX_DEPTH = 64
MAX_PROBLEMS = 10
HEAD_CHARS = 2000
# Python refuses to turn a longer integer into text (sys.int_info.default_max_str_digits).
_MAX_INT_BITS = 14_000
_NAME_CHARS = 60
_PATH_CHARS = 120
_BAD_TEXT = re.compile("[\x00\ud800-\udfff]")


class Unstorable(Exception):
    """A value that cannot be made storable (too deep, not JSON); ``problems`` say where."""

    def __init__(self, problems: list[FieldProblem]) -> None:
        self.problems = problems
        super().__init__("; ".join(str(p) for p in problems))


class Summary(BaseModel):
    """What is kept of refused input: its size as UTF-8 JSON (lone surrogates
    escaped), the SHA-256 of those bytes and their first ``HEAD_CHARS`` characters."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    bytes: int
    sha256: str
    head: str


def problems(value: object, where: str = "(root)", *, max_bytes: int | None = None) -> list[FieldProblem]:
    """What keeps ``value`` from being stored, each naming its field (at most
    ``MAX_PROBLEMS``); empty when it is storable."""
    size = _measured(value, 0)
    found = [] if size >= 0 else _found(value, where)
    # Counted in characters on the way; measured exactly only when near the limit.
    if not found and max_bytes is not None and (size < 0 or size > max_bytes // 6) and (exact := _utf8_size(value)) > max_bytes:
        found.append(FieldProblem(where, f"{exact} bytes as JSON; at most {max_bytes}"))
    return found


def _measured(value: object, depth: int) -> int:
    """About how many characters ``value`` takes as JSON, or -1 if it is not storable.
    The quick pass every value takes (a step checks several): recursive, because a
    call is cheaper than a stack entry, and safe, because it goes no deeper than
    ``MAX_DEPTH``. Exact types only: anything else (a tuple, a subclass) is left to
    the slow pass."""
    if type(value) is str:
        return len(value) + 2 if _fits(value) else -1
    if type(value) is dict:
        if depth >= MAX_DEPTH:
            return -1
        size = 2
        for key, child in value.items():
            measured = _measured(child, depth + 1) if type(key) is str and _fits(key) else -1
            if measured < 0:
                return -1
            size += len(key) + measured + 4
        return size
    if type(value) is list:
        if depth >= MAX_DEPTH:
            return -1
        size = 2
        for child in value:
            measured = _measured(child, depth + 1)
            if measured < 0:
                return -1
            size += measured + 1
        return size
    if value is None or type(value) is bool:
        return 5
    if type(value) is int:
        return 20 if value.bit_length() <= _MAX_INT_BITS else -1
    if type(value) is float:
        return 25 if math.isfinite(value) else -1
    return -1


def _fits(text: str) -> bool:
    return "\x00" not in text and (text.isascii() or _BAD_TEXT.search(text) is None)


def _found(value: object, where: str) -> list[FieldProblem]:
    """The slow pass, for a value the quick one refused: iterative, whatever the
    depth, and naming each problem."""
    found: list[FieldProblem] = []
    stack: list[tuple[object, str, int]] = [(value, where, 0)]
    while stack and len(found) < MAX_PROBLEMS:
        item, path, depth = stack.pop()
        if isinstance(item, str):
            _text(item, path, found)
        elif isinstance(item, int) and not isinstance(item, bool):
            if item.bit_length() > _MAX_INT_BITS:
                found.append(FieldProblem(path, f"a number of {item.bit_length()} bits is too large to store"))
        elif isinstance(item, float):
            if not math.isfinite(item):
                found.append(FieldProblem(path, f"{item} is not a number JSON can hold"))
        elif isinstance(item, dict | list | tuple):
            if depth >= MAX_DEPTH:
                found.append(FieldProblem(path, f"nested more than {MAX_DEPTH} levels deep"))
                continue
            for key, child in reversed(list(_children(item))):
                if isinstance(key, str):
                    _text(key, _child_path(path, key), found, "its name ")
                elif not isinstance(item, list | tuple):
                    found.append(FieldProblem(path, f"an object's keys must be text, not {type(key).__name__}"))
                    continue
                stack.append((child, _child_path(path, key), depth + 1))
        elif item is not None and not isinstance(item, bool):
            found.append(FieldProblem(path, f"not a JSON value ({type(item).__name__})"))
    return found


def _children(item: dict[Any, Any] | list[Any] | tuple[Any, ...]) -> Iterator[tuple[object, object]]:
    return iter(item.items()) if isinstance(item, dict) else enumerate(item)


def _child_path(path: str, key: object) -> str:
    if len(path) > _PATH_CHARS:
        # Deep enough to be found: the rest of the way down is not worth spelling out.
        return path if path.endswith("...") else path + "..."
    if isinstance(key, int):
        return f"[{key}]" if path == "(root)" else f"{path}[{key}]"
    name = escaped_text(str(key))
    name = name if len(name) <= _NAME_CHARS else name[:_NAME_CHARS] + "..."
    return name if path == "(root)" else f"{path}.{name}"


def _text(text: str, path: str, found: list[FieldProblem], whose: str = "") -> None:
    if text.isascii() and "\x00" not in text:
        return
    bad = _BAD_TEXT.search(text)
    if bad is None:
        return
    char = bad.group()
    at = f"at character {bad.start()}"
    if char == "\x00":
        found.append(FieldProblem(path, f"{whose}contains a NUL character (U+0000) {at}, which cannot be stored"))
    else:
        found.append(FieldProblem(path, f"{whose}contains a lone surrogate (U+{ord(char):04X}) {at}: not valid Unicode text"))


def escaped_text(text: str) -> str:
    """``text`` with each NUL and lone surrogate written as an escape: a surrogate that
    stands for an undecodable byte (U+DC80-U+DCFF, Python's reading of a name that is
    not UTF-8) as that byte (``\\xe9``), any other as its code point (``\\ud800``)."""
    if text.isascii() and "\x00" not in text:
        return text
    return _BAD_TEXT.sub(_escape, text)


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    if code == 0:
        return "\\x00"
    if 0xDC80 <= code <= 0xDCFF:
        return f"\\x{code - 0xDC00:02x}"
    return f"\\u{code:04x}"


def escaped(value: JSON, where: str = "(root)") -> JSON:
    """Tool output made storable: text escaped (``escaped_text``), everything else as
    it was; ``Unstorable`` for what escaping cannot mend (too deep, not JSON). The
    value itself is returned when there is nothing to escape."""
    found = problems(value, where)
    if not found:
        return value
    return _escaped(value, where, 0)


def _escaped(value: object, path: str, depth: int) -> JSON:
    if isinstance(value, str):
        return escaped_text(value)
    if isinstance(value, dict | list | tuple):
        if depth >= MAX_DEPTH:
            raise Unstorable([FieldProblem(path, f"nested more than {MAX_DEPTH} levels deep")])
        if isinstance(value, dict):
            out: dict[str, JSON] = {}
            for key, child in value.items():
                if not isinstance(key, str):
                    raise Unstorable([FieldProblem(path, f"an object's keys must be text, not {type(key).__name__}")])
                out[escaped_text(key)] = _escaped(child, _child_path(path, key), depth + 1)
            return out
        return [_escaped(child, f"{path}[{n}]", depth + 1) for n, child in enumerate(value)]
    unfit = problems(value, path)
    if unfit:
        raise Unstorable(unfit)
    return value


def summary(value: object) -> Summary:
    """Size, digest and head of any value, however large, deep or broken: what is
    stored of input that is refused. For a storable value the digest is that of its
    canonical JSON (``core.jsonutil.digest``)."""
    hasher = hashlib.sha256()
    size = 0
    head: list[str] = []
    kept = 0
    for chunk in _encoded(value):
        data = chunk.encode("utf-8")
        hasher.update(data)
        size += len(data)
        if kept < HEAD_CHARS:
            head.append(chunk[: HEAD_CHARS - kept])
            kept += len(head[-1])
    return Summary(bytes=size, sha256=hasher.hexdigest(), head="".join(head))


class _Token(str):
    """Literal JSON text on the encoder's stack, as opposed to a value to encode."""


def _encoded(value: object) -> Iterator[str]:
    """Canonical JSON (sorted keys, no spaces) of ``value``, piece by piece and
    without recursion; what JSON cannot hold is written as text saying what it was,
    and text that is not valid Unicode with its escapes."""
    stack: list[object] = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, _Token):
            yield str(item)
        elif isinstance(item, str):
            yield _string(item)
        elif item is None or isinstance(item, bool | float):
            yield json.dumps(item)
        elif isinstance(item, int):
            yield str(item) if item.bit_length() <= _MAX_INT_BITS else f'"(a number of {item.bit_length()} bits)"'
        elif isinstance(item, dict):
            entries = sorted(item.items(), key=lambda entry: str(entry[0]))
            stack.append(_Token("}"))
            for n, (key, child) in reversed(list(enumerate(entries))):
                stack.append(child)
                stack.append(_Token(("," if n else "") + _string(str(key)) + ":"))
            yield "{"
        elif isinstance(item, list | tuple):
            stack.append(_Token("]"))
            for n, child in reversed(list(enumerate(item))):
                stack.append(child)
                if n:
                    stack.append(_Token(","))
            yield "["
        else:
            yield json.dumps(f"(not JSON: {type(item).__name__})")


def _string(text: str) -> str:
    """A JSON string as canonical JSON writes it; one holding a lone surrogate, which
    UTF-8 cannot carry, with every character beyond ASCII escaped."""
    encoded = json.dumps(text, ensure_ascii=False)
    return encoded if _BAD_TEXT.search(encoded) is None else json.dumps(text)


def _utf8_size(value: object) -> int:
    return sum(len(chunk.encode("utf-8")) for chunk in _encoded(value))
