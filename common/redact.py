"""One redaction step for everything the server keeps or shows: configured secret
values (the server's own secret-bearing environment variables) and well-known
credential shapes are replaced by ``MASK`` before anything is written.

Where it happens, and why there:

- **At proposal time** (``runs.proposers.MaskingProposer``): a proposal is masked before
  the gates see it, so the run works with the masked value from the start. The
  approval key (a digest over tool, args and revision), the ledger, the state and the
  request the reviewer sees all describe the same arguments, and a run resumed from
  its (masked) stored state computes the same key again. Masking only in storage
  would leave the live run holding a raw value whose key no stored row can match.
- **At the persistence boundary** (the ``Redacted*Field`` column types below): every
  column that holds run data (state snapshots, ledger and effect arguments,
  receipts, evidence, approval arguments, diff and evidence, reports, events, webhook
  bodies, stop messages) is masked in ``get_db_prep_value``, which every write path
  goes through (``save``, ``create``, ``bulk_create``, ``update``). Tool output and
  file contents (a ``read_file`` result, the diff against a file holding a key) come
  from the workspace; the raw value stays only in the sandbox workspace file itself,
  which is the user's data, never in the database.
- **When served**: artifacts (files on disk) are masked when shown or downloaded.

A masked value shows ``[redacted]`` wherever it appears, and the reviewer's page says
that something was masked. Masking never crosses a line break: a diff keeps every
file, hunk and line (a request whose diff it changed anyway cannot be granted:
``core.patchtext.preview_problem``)."""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from django.conf import settings
from django.core.signals import setting_changed
from django.db import models
from django.db.backends.base.operations import BaseDatabaseOperations
from django.dispatch import receiver
from psycopg.types.json import Jsonb

from common.secret_detector import MASK as MASK
from common.secret_detector import NAMED_VALUE, CleanPieces, credential_name, kind_mask, looks_random, masked_line, might_hold

# What counts as a secret is common.secret_detector's, the publish scan's too. Every
# rule stays inside one line, so masking changes what a line says, never how many
# lines there are: a diff stays a diff with the same files, hunks and line counts,
# and nothing after a credential disappears.
# A private key is masked line by line: its BEGIN and END markers stay (they say what
# was there), the key material between them becomes MASK on each of its lines. Key
# material is base64 (with "\n" escapes when the key sits on one line of a JSON or
# env file, and the headers of an encrypted key); whatever else a line holds (a diff's
# "+", indentation, quotes, code) stays visible, so a marker can hide nothing but the
# key: a line that is not key material ends the key.
KEY_BEGIN = re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----")
KEY_END = re.compile(r"-----END [A-Z ]*PRIVATE KEY-----")
_KEY_INLINE = re.compile(r"(?:\\[nr]|[A-Za-z0-9+/=]|Proc-Type: ?[0-9A-Z,]+|DEK-Info: ?[A-Z0-9,-]+)+")
# The lead is possessive: a diff's "+" or "-" is never read as key material.
_LEAD = re.compile(r"[ +-]?+[ \t]*[\"']?")
_KEY_LINE = re.compile(r"(?P<lead>[ +-]?+[ \t]*[\"']?)(?P<body>(?:[A-Za-z0-9+/=]|\\[nr])+)(?P<trail>[\"']?[ \t]*[+,\\]?[ \t]*)")
_KEY_TAIL = re.compile(r"(?:[A-Za-z0-9+/=]|\\[nr])+")
_ESCAPES = re.compile(r"\\[nr]")
_CONTINUES = re.compile(r"[ \t\"'+,\\]*")  # what may follow a marker whose key goes on below it
_KEY_KEEP = re.compile(r"[ +-]?[ \t]*(?:(?:Proc-Type|DEK-Info):.*)?")  # inside a key, kept as it is


def secret_values() -> list[str]:
    """The configured secret values, each line of a multi-line value on its own (so
    masking stays within lines, like every pattern), longest first: a list of the
    caller's own."""
    return list(_configured_lines())


@functools.cache
def _configured_lines() -> tuple[str, ...]:
    """Made once until the setting changes (``_secrets_changed``): a step asks for
    them seven times, and each read of a setting is Django's
    ``LazyObject.__getattribute__`` in Python (some 3,500 instructions). The settings
    change only through ``override_settings`` (the test suite's, pytest-django's
    ``settings`` too), which says so."""
    values = tuple(getattr(settings, "HARNESS_SECRET_VALUES", ()))
    lines = {line.rstrip("\r") for value in values for line in value.split("\n")}
    return tuple(sorted((v for v in lines if len(v) >= 8), key=len, reverse=True))


@receiver(setting_changed)
def _secrets_changed(*, setting: str, **kwargs: object) -> None:
    if setting == "HARNESS_SECRET_VALUES":
        _configured_lines.cache_clear()


def redact_text(text: str, secrets: list[str], kinds: bool = False) -> str:
    """``text`` masked; with ``kinds``, each mask names the kind of what it hides
    (``common.secret_detector.kind_mask``)."""
    if not might_hold(text, secrets):
        return text
    text = "\n".join(masked_line(line, secrets, MASK, kinds) for line in text.split("\n"))
    if "-----BEGIN" in text:
        text = "\n".join(_mask_keys(text.split("\n")))
    return text


def redact_lines(lines: Iterable[str], secrets: list[str]) -> Iterator[str]:
    """``redact_text`` over a text given line by line (without the line breaks), for a
    reader that streams: a key that spans lines is followed from one to the next."""
    return _mask_keys(_mask_shapes(line, secrets) for line in lines)


def _mask_shapes(line: str, secrets: list[str]) -> str:
    return masked_line(line, secrets, MASK) if might_hold(line, secrets) else line


def _mask_keys(lines: Iterable[str]) -> Iterator[str]:
    inside = False
    for line in lines:
        if inside:
            line, inside = _inside_key(line)
            if inside:
                yield line
                continue
        line, inside = _key_starts(line)
        yield line


def _key_starts(line: str) -> tuple[str, bool]:
    """The line with key material after each BEGIN marker masked, and whether the
    last key on it goes on past the line's end."""
    out, pos, inside = [], 0, False
    while (begin := KEY_BEGIN.search(line, pos)) is not None:
        out.append(line[pos : begin.end()])
        pos = begin.end()
        body = _KEY_INLINE.match(line, pos)
        if body is not None:
            out.append(MASK if _ESCAPES.sub("", body.group()) else body.group())
            pos = body.end()
        end = KEY_END.match(line, pos)
        inside = end is None and _CONTINUES.fullmatch(line, pos) is not None
        if end is not None:
            out.append(end.group())
            pos = end.end()
    out.append(line[pos:])
    return "".join(out), inside


def _inside_key(line: str) -> tuple[str, bool]:
    """A line after a BEGIN marker without its END: (masked line, still inside). A
    line that is not key material is handed back as it is, outside."""
    end = KEY_END.search(line)
    if end is not None:
        lead = min(_LEAD.match(line).end(), end.start())  # type: ignore[union-attr]  # it matches the empty string
        head = line[:lead] + _KEY_TAIL.sub(MASK, line[lead : end.start()])
        rest, inside = _key_starts(line[end.start() :])
        return head + rest, inside
    body = _KEY_LINE.fullmatch(line)
    if body is not None:
        return body["lead"] + MASK + body["trail"], True
    if _KEY_KEEP.fullmatch(line):
        return line, True
    return line, False


def redact(value: Any, secrets: list[str] | None = None, kinds: bool = False) -> Any:
    """``value`` with every string (keys and values) masked (``kinds``: as
    ``redact_text``). A value with nothing to mask, nearly every one, is returned as
    it is: one look at its JSON text tells, where walking every string of a run's
    state at each checkpoint was a quarter of a durable step's CPU."""
    secrets = secret_values() if secrets is None else secrets
    if isinstance(value, str):
        return redact_text(value, secrets, kinds)
    if isinstance(value, dict | list):
        try:
            if _nothing_to_mask(_dumps(value), secrets):
                return value
        except (TypeError, ValueError):
            pass  # not JSON: walked like any other value
    return _walk(value, secrets, kinds)


class MaskedJSON:
    """JSON text that ``masked`` or ``masked_text`` produced: a redacted column writes
    it as it is, so a checkpoint serialises each value once."""

    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text


def masked(value: Any, secrets: list[str]) -> tuple[Any, MaskedJSON]:
    """``value`` masked, and the JSON text a redacted column stores for it."""
    return _masked(value, _dumps(value), secrets)


def _masked(value: Any, text: str, secrets: list[str]) -> tuple[Any, MaskedJSON]:
    if _nothing_to_mask(text, secrets):
        return value, MaskedJSON(text)
    value = _walk(value, secrets)
    return value, MaskedJSON(_dumps(value))


def masked_each(values: Sequence[Any], secrets: list[str]) -> list[tuple[Any, MaskedJSON]]:
    """``masked`` of each of ``values`` (a checkpoint's event payloads), looked at once:
    their JSON texts, joined by line breaks, hold something to mask exactly when one of
    them does, since JSON escapes every line break within a text and no finding crosses
    one (common.secret_detector: none of its rules reads a line break, and a configured
    value is looked for line by line, ``secret_values``). One scan of the lot spares
    each payload after the first the part of a scan that does not depend on its length
    (some 17,000 instructions a payload)."""
    texts = [_dumps(value) for value in values]
    if len(texts) > 1 and _nothing_to_mask("\n".join(texts), secrets):
        return [(value, MaskedJSON(text)) for value, text in zip(values, texts, strict=True)]
    return [_masked(value, text, secrets) for value, text in zip(values, texts, strict=True)]


def masked_part(value: Any) -> MaskedJSON:
    """The JSON text of ``value``, a part of a value ``masked`` or ``masked_each`` gave
    (a receipt within its event's payload): masked as a part of it, so not scanned
    again. Its strings are some of the whole's, each masked as the whole's were (a
    string by what it holds, a key's value by the key's name)."""
    return MaskedJSON(_dumps(value))


def masked_text(text: str, secrets: list[str]) -> MaskedJSON:
    """JSON text (a model's ``model_dump_json``) masked."""
    if _nothing_to_mask(text, secrets):
        return MaskedJSON(text)
    return MaskedJSON(_dumps(_walk(json.loads(text), secrets)))


class MaskedHead:
    """``masked_text`` of JSON texts that all begin with the same ``head`` (a run's
    state: the fields set at its start), the head scanned once per set of secrets
    instead of with every text.

    Where the head ends with the comma of a ``,"`` whose quote starts the rest, for ASCII
    texts and secrets JSON does not escape (for any other ``_nothing_to_mask`` says no,
    and the whole text is masked as ``masked_text`` does), a text has nothing to mask
    exactly when none of its pieces has (common.secret_detector.CleanPieces), and the
    pieces of head + rest are the head's and those of the rest after that quote. Any
    other text is masked whole."""

    __slots__ = ("_verdict", "head")

    def __init__(self, head: str) -> None:
        self.head = head
        # The secrets the head was scanned with and whether it was clean, set together
        # (a store is one thread's, but a pair half of one scan and half of another would
        # let a secret through): other secrets, another scan.
        self._verdict: tuple[list[str], bool] | None = None

    def masked(self, rest: str, secrets: list[str]) -> MaskedJSON:
        """``masked_text(self.head + rest, secrets)``."""
        text = self.head + rest
        verdict = self._verdict
        if verdict is None or verdict[0] != secrets:
            head = self.head
            verdict = self._verdict = (list(secrets), head.endswith(",") and head.isascii() and _nothing_to_mask(head, secrets))
        if verdict[1] and rest.startswith('"') and rest.isascii() and _nothing_to_mask(rest[1:], secrets):
            return MaskedJSON(text)
        return masked_text(text, secrets)


def masked_alike(then: Sequence[str], now: list[str]) -> bool:
    """Whether values taken from ones ``masked`` with the secrets ``then`` (their strings,
    cut or joined into JSON text) have nothing more to mask with the secrets ``now``:
    the same secrets (the shapes do not change within a process), none of which JSON
    escapes (such a one could appear across two strings once they are JSON text)."""
    return list(then) == now and not any(_needs_escaping(secret) for secret in now)


# What json.dumps(value, ensure_ascii=False, separators=(",", ":")) makes, without the
# encoder it makes for each value given options: a quarter of masking an event.
_dumps = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode


def _nothing_to_mask(text: str, secrets: list[str]) -> bool:
    """True when no string in the JSON ``text`` can hold a secret or a credential
    shape's prefix. The prefixes are never escaped in JSON, and a secret that JSON
    would escape is never looked for in the text (the caller walks instead), so the
    answer is exact; a false alarm only costs the walk."""
    if any(_needs_escaping(secret) for secret in secrets):
        return False
    global _clean
    clean = _clean
    if clean.values != secrets:
        clean = _clean = CleanPieces(secrets)
    return not clean.might_hold(text)


# One for the process (a set's look-ups and additions are safe across threads); it
# starts over when the configured values change.
_clean = CleanPieces([])


@functools.lru_cache(maxsize=256)
def _needs_escaping(secret: str) -> bool:
    return '"' in secret or "\\" in secret or any(ord(c) < 0x20 for c in secret)


def _walk(value: Any, secrets: list[str], kinds: bool = False) -> Any:
    if isinstance(value, str):
        return redact_text(value, secrets, kinds)
    if isinstance(value, dict):
        return {redact_text(str(k), secrets, kinds): _named(str(k), v, secrets, kinds) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_walk(v, secrets, kinds) for v in value]
    return value


def _named(name: str, value: Any, secrets: list[str], kinds: bool) -> Any:
    """A value under a credential-like key (``{"client_secret": "..."}``) is masked
    whole when it looks random, as it would be after ``client_secret=`` in a line."""
    if isinstance(value, str) and credential_name(name) and looks_random(value):
        return kind_mask(NAMED_VALUE) if kinds else MASK
    return _walk(value, secrets, kinds)


def redact_bytes(content: bytes) -> bytes:
    """Mask text in bytes of any encoding (undecodable bytes pass through unchanged),
    line by line as a reader that streams would (``redact_lines``)."""
    lines = content.decode("utf-8", "surrogateescape").split("\n")
    return "\n".join(redact_lines(lines, secret_values())).encode("utf-8", "surrogateescape")


def is_masked(value: Any) -> bool:
    """Whether a stored value had something masked (for the reviewer's notice)."""
    if isinstance(value, str):
        return MASK in value
    if isinstance(value, dict):
        return any(is_masked(k) or is_masked(v) for k, v in value.items())
    if isinstance(value, list):
        return any(is_masked(v) for v in value)
    return False


class _BaseClassPath:
    """The column is the same as its base class's in the database, so migrations
    record the base class: swapping a column to a redacted one needs no migration."""

    def deconstruct(self) -> Any:
        name, _path, args, kwargs = super().deconstruct()  # type: ignore[misc]
        base = next(cls for cls in type(self).__mro__ if cls.__module__ == "django.db.models.fields" or cls is models.JSONField)
        return name, f"django.db.models.{base.__name__}", args, kwargs


class _AsWritten(json.JSONEncoder):
    def encode(self, o: Any) -> str:
        return o.text if isinstance(o, MaskedJSON) else super().encode(o)


class RedactedJSONField(_BaseClassPath, models.JSONField):
    """A JSON column whose strings (keys and values) are masked on every write."""

    def get_db_prep_value(self, value: Any, connection: Any, prepared: bool = False) -> Any:
        if isinstance(value, MaskedJSON):
            return as_written(value, connection)
        return super().get_db_prep_value(redact(value), connection, prepared)


def as_written(value: MaskedJSON, connection: Any) -> Any:
    """What the backend's ``adapt_json_value`` makes of the text through ``_AsWritten``,
    without a JSON encoder made for every value (``json.dumps(value, cls=...)``), which
    was most of the cost of a checkpoint's half dozen: on PostgreSQL psycopg's Jsonb of
    the text, dumped as it is; where the backend keeps Django's base adaptation (SQLite),
    the text itself."""
    if connection.vendor == "postgresql":
        return Jsonb(value.text, dumps=_text)
    if type(connection.ops).adapt_json_value is BaseDatabaseOperations.adapt_json_value:
        return value.text
    return connection.ops.adapt_json_value(value, _AsWritten)


def _text(text: str) -> str:
    return text


class RedactedTextField(_BaseClassPath, models.TextField):
    """A text column masked on every write."""

    def get_prep_value(self, value: Any) -> Any:
        value = super().get_prep_value(value)
        return redact_text(value, secret_values()) if isinstance(value, str) else value
