"""What a person is shown of text a model, a tool or another person wrote: every
character that could hide text, reorder it on screen or pass one line off as several
becomes a visible mark naming its code point (``⟨U+202E⟩``), so what is read is
what is there (DESIGN 15). The one definition of such a character, for the pages
(``visible_html``), mail, webhooks and the API's words (``visible_text``), the
warning above a diff and the publish gate (``hidden_in_patch``), and the tools'
arguments that refuse them (core.tools).

Hidden: Unicode's format characters (category Cf: the bidirectional controls
U+202A-202E, U+2066-2069, U+200E/200F and U+061C, the zero-width characters
U+200B-200D, U+2060, U+FEFF, soft hyphens), the tag characters U+E0000-E007F,
the C0 and C1 controls and DEL (terminal escapes start with ESC), the line and
paragraph separators U+2028/2029 and lone surrogates (bytes that were not UTF-8,
read with ``surrogateescape``). Not hidden: ``\\n`` and ``\\t``, and ``\\r`` where
it ends a line (``\\r\\n``, or the end of a diff line of a CRLF file); anywhere
else a ``\\r`` is hidden (a terminal returns to the line's start over it)."""

from __future__ import annotations

import re
import sys
import unicodedata
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from functools import cache
from html import escape

from core.patchtext import PatchLine, read_patch


@cache
def _class() -> str:
    """The hidden characters as one regular-expression character class, Unicode's
    format characters listed from the running Python's tables (once a process, 0.1 s),
    consecutive ones as a range: the re module tests a character outside the Basic
    Multilingual Plane against each of those items in turn, so 120 single characters
    there made every search test each character of the text 120 times (issue 45)."""
    codes = [c for c in range(sys.maxunicode + 1) if unicodedata.category(chr(c)) == "Cf"]
    runs: list[list[int]] = []  # [first, last] of each run of consecutive code points
    for code in codes:
        if runs and runs[-1][1] == code - 1:
            runs[-1][1] = code
        else:
            runs.append([code, code])
    formats = "".join(re.escape(chr(a)) if a == b else f"{re.escape(chr(a))}-{re.escape(chr(b))}" for a, b in runs)
    return f"[\\x00-\\x08\\x0b\\x0c\\x0e-\\x1f\\x7f-\\x9f\\u2028\\u2029\\ud800-\\udfff\\U000e0000-\\U000e007f{formats}]"


@cache
def _hidden() -> re.Pattern[str]:
    """A hidden character in text: one of the class, or a carriage return that ends no line."""
    return re.compile(f"{_class()}|\\r(?!\\n|\\Z)")


@cache
def _one() -> re.Pattern[str]:
    return re.compile(_class())


@cache
def _ascii_suspects() -> re.Pattern[str]:
    """The ASCII characters that are or may be hidden (the class's, and ``\\r``), as one
    class of a bitmap that the re module scans for without trying a pattern at each
    character: ASCII text without them holds nothing hidden."""
    suspects = "".join(re.escape(chr(c)) for c in range(128) if is_hidden(chr(c)) or chr(c) == "\r")
    return re.compile(f"[{suspects}]")


def prepare() -> None:
    """Build the patterns now rather than at the first text looked at: the class takes a
    pass over every code point (harness_site.asgi does it before the web process serves)."""
    _hidden()
    _ascii_suspects()


def is_hidden(char: str) -> bool:
    """Whether a character is hidden wherever it stands (``\\r`` is not: whether it
    is depends on what follows it, which ``split_hidden`` sees)."""
    return _one().fullmatch(char) is not None


def holds_hidden(text: str) -> bool:
    # Most text is ASCII (a flag of the string's, read in constant time) without a
    # control character: one scan in C for those decides.
    if text.isascii() and _ascii_suspects().search(text) is None:
        return False
    return _hidden().search(text) is not None


def split_hidden(text: str) -> Iterator[tuple[str, bool]]:
    """``text`` as runs of plain text and single hidden characters (True)."""
    start = 0
    for found in _hidden().finditer(text):
        if found.start() > start:
            yield text[start : found.start()], False
        yield found.group(), True
        start = found.end()
    if start < len(text):
        yield text[start:], False


def code_point(char: str) -> str:
    return f"U+{ord(char):04X}"


def mark(char: str) -> str:
    """The visible stand-in of a hidden character."""
    return f"\u27e8{code_point(char)}\u27e9"


def char_name(char: str) -> str:
    """The code point and its Unicode name where it has one (controls have none)."""
    code = ord(char)
    if 0xDC80 <= code <= 0xDCFF:
        return f"{code_point(char)}, the byte 0x{code - 0xDC00:02X}, which is not UTF-8"
    if 0xD800 <= code <= 0xDFFF:
        return f"{code_point(char)}, a surrogate with no pair"
    name = unicodedata.name(char, "")
    return f"{code_point(char)} {name}" if name else f"{code_point(char)}, a control character"


def hidden_chars(text: str) -> list[str]:
    """The hidden characters ``text`` holds, each once, in the order first met."""
    return list(dict.fromkeys(char for char, hidden in split_hidden(text) if hidden))


def visible_text(text: str) -> str:
    """``text`` with each hidden character replaced by its mark: for mail, webhooks'
    text and the API's human-readable fields."""
    if not holds_hidden(text):
        return text  # most text: one search in C (the live trace marks every string of every event)
    return "".join(mark(piece) if hidden else piece for piece, hidden in split_hidden(text))


def visible_data(value: object) -> object:
    """A JSON value with ``visible_text`` applied to every string in it, keys too: for
    data shown to a person (the trace's events, set as text by the page's script)."""
    if isinstance(value, str):
        return visible_text(value)
    if isinstance(value, dict):
        return {visible_text(str(key)): visible_data(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [visible_data(item) for item in value]
    return value


def visible_html(text: str) -> str:
    """``text`` escaped for HTML, each hidden character a ``hidden-char`` span holding
    its mark, named in full in its title (static/css/harness.css styles it apart from
    the text around it). The caller marks the result safe."""
    if not holds_hidden(text):
        return escape(text)  # most text: one pass in C
    return "".join(
        f'<span class="hidden-char" title="{escape(char_name(piece))}">{mark(piece)}</span>' if hidden else escape(piece)
        for piece, hidden in split_hidden(text)
    )


# The kind of a publish finding of hidden characters (core.publish_gate), beside the
# secret scan's kinds, by which the trace and the outcome tell the two apart.
HIDDEN_KIND = "hidden characters"


@dataclass(frozen=True)
class HiddenLine:
    """A line of a diff holding hidden characters: its file, its number on the side
    it is on (the new file's for added and context lines, the old file's for removed
    ones; 0 for a line outside any file's hunks, such as a header) and what it holds."""

    path: str
    line: int
    kind: str  # added | removed | context | header
    chars: tuple[str, ...]

    @property
    def code_points(self) -> str:
        return ", ".join(code_point(c) for c in self.chars)

    @property
    def where(self) -> str:
        if self.kind == "header":
            return f"{self.path or 'the diff'}: a header line"
        return f"{self.path}: line {self.line}" + (" (removed)" if self.kind == "removed" else "")


def hidden_in_patch(text: str) -> list[HiddenLine]:
    """Each line of a unified diff that holds hidden characters, read as the applier
    reads the diff (core.patchtext.read_patch): the warning above the diff names them,
    and ``hidden_characters: refuse`` refuses a change that adds any (core.publish_gate)."""
    return hidden_lines(read_patch(text))


def hidden_lines(lines: Iterable[PatchLine]) -> list[HiddenLine]:
    """``hidden_in_patch`` of a diff already read."""
    found = []
    for line in lines:
        chars = hidden_chars(line.text)
        if chars:
            kind = line.kind if line.kind in ("added", "removed", "context") else "header"
            number = line.old_no if line.kind == "removed" else line.new_no
            found.append(HiddenLine(line.path, number or 0, kind, tuple(chars)))
    return found
