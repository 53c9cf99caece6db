"""The one detector of secrets: what masking hides in everything Harness stores and
shows (``common.redact``) and what the publish scan reports in a change
(``common.secret_scan``) are the same findings of the same rules, so a value the
scan names is a value the records never hold, and the reverse.

The rules, each within one line (a secret never spans a line break here; a private
key's body lines are followed by ``common.redact``'s key masking):

- **configured values**: the server's own secret-bearing settings
  (``HARNESS_SECRET_VALUES``), matched exactly;
- **credential shapes**: the regular expressions of Yelp's detect-secrets plugins for
  cloud keys and tokens (AWS key ids and quoted secret keys, GitHub, GitLab, Slack,
  Stripe, PyPI, SendGrid), with Harness's own for shapes those plugins lack (OpenAI and
  Anthropic keys, GitHub's fine-grained tokens, Google API keys); a shape must not
  follow a letter or digit, so ``task-...`` is a word, not a key;
- **a JSON web token and a password in a URL** (``scheme://user:password@``);
- **a private key's BEGIN marker** (detect-secrets' private key plugin's markers);
- **a random value next to a credential-like name** (``aws_secret_access_key = ...``,
  ``"client_secret": "..."``): at least 16 characters of a key alphabet, with letters
  and digits, above 4 bits of Shannon entropy (detect-secrets' measure, over its
  base64 alphabet). Values made only of hex digits and dashes are left alone: every id
  Harness keeps (commits, digests, idempotency and lease keys) has that shape, and a
  lease token masked in a checkpoint would stop the run.

The publish scan reads further (``hidden``, ``split_across``): literals split in two
or across lines, reversed, base64 of a secret, random base64 literals and hex values
next to a credential name. A mask a proposal got names the kind it hides
(``kind_mask``), so that scan, which reads the workspace after masking, still names it.

Nothing here imports Django or the apps: the sandbox's publish scan uses it too."""

from __future__ import annotations

import base64
import binascii
import math
import re
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

MASK = "[redacted]"  # what masking puts in a secret's place (common.redact)
CONFIGURED = "configured secret value"
MASKED = "masked secret"
PRIVATE_KEY = "private key"
NAMED_VALUE = "random value next to a credential name"
JWT = "JSON web token"
URL_CREDENTIALS = "password in a URL"


@dataclass(frozen=True)
class Shape:
    kind: str
    pattern: re.Pattern[str]
    # Literal strings one of which every match holds (case as given; ``folded``: in
    # the lowercased text): a line holding none skips the expression, which is most
    # of masking's cost on a large state.
    prefixes: tuple[str, ...]
    folded: bool = False
    # Instead of prefixes: an expression every match's text matches, searched first
    # (a literal at its start makes that one fast scan).
    gate: re.Pattern[str] | None = None

    def may_match(self, line: str, folded: str) -> bool:
        if self.gate is not None:
            return self.gate.search(line) is not None
        return any(prefix in (folded if self.folded else line) for prefix in self.prefixes)

    def spans(self, line: str) -> Iterable[tuple[int, int]]:
        for found in self.pattern.finditer(line):
            group = next((i for i in range(1, (found.re.groups or 0) + 1) if found.group(i)), 0)
            yield found.span(group)


def _bounded(pattern: str, flags: int = 0) -> re.Pattern[str]:
    return re.compile(r"(?<![A-Za-z0-9])(?:" + pattern + ")", flags)


# The expressions of Yelp's detect-secrets plugins (1.5.0), written out here: their
# lists are no public interface of that library (issue 44), and a copy cannot change
# under Harness at an upgrade. Its rules' names stay in the kinds' words.
SHAPES: tuple[Shape, ...] = (
    Shape("AWS access key id", _bounded(r"(?:A3T[A-Z0-9]|ABIA|ACCA|AKIA|ASIA)[0-9A-Z]{16}"), ("A3T", "ABIA", "ACCA", "AKIA", "ASIA")),
    Shape(
        "AWS secret access key",
        _bounded(r"aws.{0,20}?(?:key|pwd|pw|password|pass|token).{0,20}?[\'\"]([0-9a-zA-Z/+]{40})[\'\"]", re.IGNORECASE),
        ("aws",),
        folded=True,
    ),
    Shape("GitHub token", _bounded(r"(?:ghp|gho|ghu|ghs|ghr)_[A-Za-z0-9_]{36}"), ("ghp_", "gho_", "ghu_", "ghs_", "ghr_")),
    Shape(
        "GitLab token",
        _bounded(
            r"(?:glpat|gldt|glft|glsoat|glrt)-[A-Za-z0-9_\-]{20,50}(?!\w)|GR1348941[A-Za-z0-9_\-]{20,50}(?!\w)"
            r"|glcbt-(?:[0-9a-fA-F]{2}_)?[A-Za-z0-9_\-]{20,50}(?!\w)|glimt-[A-Za-z0-9_\-]{25}(?!\w)"
            r"|glptt-[A-Za-z0-9_\-]{40}(?!\w)|glagent-[A-Za-z0-9_\-]{50,1024}(?!\w)|gloas-[A-Za-z0-9_\-]{64}(?!\w)"
        ),
        ("glpat-", "gldt-", "glft-", "glsoat-", "glrt-", "glcbt-", "glimt-", "glptt-", "glagent-", "gloas-", "GR1348941"),
    ),
    Shape(
        "Slack token",
        _bounded(
            r"xox(?:a|b|p|o|s|r)-(?:\d+-)+[a-z0-9]+|https://hooks\.slack\.com/services/T[a-zA-Z0-9_]+/B[a-zA-Z0-9_]+/[a-zA-Z0-9_]+",
            re.IGNORECASE,
        ),
        ("xox", "XOX", "hooks.slack.com"),
    ),
    Shape("Stripe key", _bounded(r"(?:r|s)k_live_[0-9a-zA-Z]{24}"), ("k_live_",)),
    Shape("PyPI token", _bounded(r"pypi-AgEIcHlwaS5vcmc[A-Za-z0-9-_]{70,}|pypi-AgENdGVzdC5weXBpLm9yZw[A-Za-z0-9-_]{70,}"), ("pypi-",)),
    Shape("SendGrid key", _bounded(r"SG\.[a-zA-Z0-9_-]{22}\.[a-zA-Z0-9_-]{43}"), ("SG.",)),
    Shape("Anthropic or OpenAI key", re.compile(r"(?<![A-Za-z0-9])sk-(?:ant-)?[A-Za-z0-9_-]{16,}"), ("sk-",)),
    Shape(
        "GitHub token",
        re.compile(r"(?<![A-Za-z0-9])(?:gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,})"),
        ("ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_"),
    ),
    Shape("Google API key", re.compile(r"(?<![A-Za-z0-9])AIza[0-9A-Za-z_-]{35}"), ("AIza",)),
    # Three base64url parts, the first two JSON objects ("eyJ" is '{"').
    Shape(JWT, re.compile(r"(?<![A-Za-z0-9_-])eyJ[A-Za-z0-9_-]{10,}\.eyJ[A-Za-z0-9_-]{2,}\.[A-Za-z0-9_-]{16,}"), ("eyJ",)),
    # Only the password is the secret; a template's (``{password}``, ``$PASS``,
    # ``%(password)s``) or a shown mask (``****``, ``[redacted]``) is none.
    Shape(
        URL_CREDENTIALS,
        re.compile(r"(?<![A-Za-z0-9+.-])[A-Za-z][A-Za-z0-9+.-]{0,20}://[^\s:/?#@\"'`<>]{1,64}:(?!\*+@)([^\s/?#@\"'`<>{}$()\[\]]{6,128})@"),
        (),
        gate=re.compile(r"://[^\s:/?#@\"'`<>]{1,64}:[^\s/?#@\"'`<>{}$()\[\]]{6,128}@"),
    ),
)
KEY_MARKERS = tuple(
    re.compile(marker)
    for marker in (
        "BEGIN DSA PRIVATE KEY",
        "BEGIN EC PRIVATE KEY",
        "BEGIN OPENSSH PRIVATE KEY",
        "BEGIN PGP PRIVATE KEY BLOCK",
        "BEGIN PRIVATE KEY",
        "BEGIN RSA PRIVATE KEY",
        "BEGIN SSH2 ENCRYPTED PRIVATE KEY",
        "PuTTY-User-Key-File-2",
    )
)  # what a scan reports a private key by

_NAMES = r"secret|token|passw(?:or)?d|pwd|api[_-]?key|access[_-]?key|private[_-]?key|credential"
# Literal parts of the names (lowercase), each in every name NAMED reads: "key" alone
# is in most of Harness's own JSON (approval and idempotency keys), "api", "access"
# and "private" are not.
_NAME_PREFIXES = ("secret", "token", "passw", "pwd", "api", "access", "private", "credential")
# The name, up to 30 more name characters, an assignment (``=``, ``:``, ``:=``, ``=>``,
# quotes around either side, JSON-escaped ones too), then the value.
NAMED = re.compile(
    rf"(?i)(?:{_NAMES})[A-Za-z0-9_.-]{{0,30}}\\?[\"']?[ \t]*(?::=|=>|[:=])[ \t]*\\?[\"']?(?P<value>[A-Za-z0-9/+=_.~-]{{16,}})"
)
CREDENTIAL_NAME = re.compile(rf"(?i)[A-Za-z0-9_.-]{{0,30}}(?:{_NAMES})[A-Za-z0-9_.-]{{0,30}}")
_HEX_ID = re.compile(r"[0-9a-fA-F-]+")
MIN_ENTROPY = 4.0


_BASE64_ALPHABET = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789+/\\-_=")


def entropy(value: str) -> float:
    """Shannon entropy in bits per character of ``value``'s base64 characters, over
    its whole length (detect-secrets' measure, so its thresholds mean the same)."""
    counts = Counter(c for c in value if c in _BASE64_ALPHABET)
    return -sum(n / len(value) * math.log2(n / len(value)) for n in counts.values())


def looks_random(value: str) -> bool:
    """A value a credential name would hold: long, letters and digits, high entropy,
    and not the hex shape of Harness's own ids."""
    return (
        len(value) >= 16
        and any(c.isdigit() for c in value)
        and any(c.isalpha() for c in value)
        and _HEX_ID.fullmatch(value) is None
        and entropy(value) >= MIN_ENTROPY
    )


def credential_name(name: str) -> bool:
    """A JSON key or variable name that says its value is a credential."""
    return CREDENTIAL_NAME.fullmatch(name) is not None


@dataclass(frozen=True)
class Hit:
    start: int
    end: int
    kind: str


# Each prefix once (several rules share theirs): a substring test is one fast scan
# of a large text, faster than one expression of them all (measured: Python's
# expressions try every position whose letter starts some prefix).
_GATES = tuple(shape.gate for shape in SHAPES if shape.gate is not None)
_PREFIXES = tuple(dict.fromkeys(p for shape in SHAPES if not shape.folded for p in shape.prefixes))
_FOLDED_PREFIXES = (*dict.fromkeys(p for shape in SHAPES if shape.folded for p in shape.prefixes), "-----begin", "putty-user-key")


def _grouped(prefixes: Sequence[str]) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """The prefixes by a lead they share (its first letter when that is a capital, rare
    in code and JSON; else its first two), each group ``(lead, members)``, the members
    empty where the lead is the one prefix: a text holds a member only if it holds its
    lead, so a text without the lead is one scan instead of one per member. Thirty
    scans of a checkpoint's JSON were most of masking's cost per step."""
    groups: dict[str, list[str]] = {}
    for prefix in prefixes:
        groups.setdefault(prefix[:1] if prefix[0].isupper() else prefix[:2], []).append(prefix)
    return tuple((members[0], ()) if len(members) == 1 else (lead, tuple(members)) for lead, members in groups.items())


_PREFIX_GROUPS = _grouped(_PREFIXES)


def might_hold(text: str, values: Sequence[str] = ()) -> bool:
    """Whether ``text`` (any text: a line, a JSON document) may hold something ``hits``
    finds; False is exact, True may be a false alarm that costs a closer look."""
    # Loops, not any() over generators: a checkpoint scans half a dozen short texts,
    # where resuming a generator per prefix was a quarter of a scan (timeit).
    for value in values:
        if value in text:
            return True
    for lead, members in _PREFIX_GROUPS:
        if lead in text and (not members or any(p in text for p in members)):
            return True
    folded = text.lower()
    for prefix in _FOLDED_PREFIXES:
        if prefix in folded:
            return True
    for gate in _GATES:
        if gate.search(text):
            return True
    return any(looks_random(m["value"]) for m in _named(text, folded))


class CleanPieces:
    """``might_hold`` over JSON texts that repeat most of themselves (a run's state at
    each checkpoint), scanning only the pieces not seen clean before: a checkpoint's
    state is some 75 pieces of which two or three changed.

    A text's pieces are what lies between its ``,"`` pairs, each but the last with its
    comma. For an ASCII text and values without ``"``, ``might_hold`` of the text is
    exactly ``might_hold`` of its pieces, any of them, since every finding lies in one
    piece and reads nothing past it: no value or prefix holds ``"``; no gate match
    does (both its classes exclude ``"``); a NAMED match holds ``"`` only after a name
    character, an assignment, a blank or a backslash, never after a comma, which no
    part of NAMED consumes, so a match (and every attempt at one) ends at the comma;
    no finding starts with the ``"`` before a piece; and an ASCII text lowers letter by
    letter, so the folded prefixes and the names are found in the pieces where they
    are in the text. The unseen pieces joined by ``,"`` again are a text of the same
    kind, so one ``might_hold`` of them answers for the whole text. Any other text is
    scanned whole. A rule added above must keep this (tests/test_mask_pieces.py)."""

    KEPT = 4096  # pieces remembered before starting over
    LONGEST = 512  # a longer piece is scanned every time instead of remembered

    def __init__(self, values: Sequence[str], shortest: int = 512) -> None:
        self.values = list(values)
        # A shorter text (an event's payload) is scanned whole: cutting it costs more
        # than its scan saves (timeit: 4.1 against 3.7 us at 143 characters, even at 470).
        self.shortest = shortest
        self._split = not any('"' in value for value in values)
        self._seen: set[str] = set()

    def might_hold(self, text: str) -> bool:
        if len(text) < self.shortest or not (self._split and text.isascii()):
            return might_hold(text, self.values)
        parts = text.split(',"')
        seen = self._seen
        unseen = [part for part in parts[:-1] if part not in seen]
        if might_hold(',"'.join([*unseen, parts[-1]]), self.values):
            return True
        if len(seen) > self.KEPT:
            seen.clear()
        seen.update(part for part in unseen if len(part) <= self.LONGEST)
        return False


def hits(line: str, values: Sequence[str] = ()) -> list[Hit]:
    """What the rules find in one line, left to right, overlaps merged into the first
    (a configured value first: it is the most certain)."""
    found: list[Hit] = []
    for value in values:
        start = line.find(value)
        while start >= 0:
            found.append(Hit(start, start + len(value), CONFIGURED))
            start = line.find(value, start + len(value))
    folded = line.lower()
    for shape in SHAPES:
        if shape.may_match(line, folded):
            found += [Hit(start, end, shape.kind) for start, end in shape.spans(line)]
    found += [Hit(*m.span("value"), NAMED_VALUE) for m in _named(line, folded) if looks_random(m["value"])]
    return _merged(found)


def _named(text: str, folded: str) -> Iterator[re.Match[str]]:
    """NAMED's matches, tried only where a name starts: a case-insensitive search
    over a whole text (a checkpoint's JSON holds "tokens" and "access" often) is most
    of masking's cost, finding the names in the lowercased text is not. A text whose
    lowercase has another length (a few non-ASCII letters) is searched the slow way."""
    if len(folded) != len(text):
        yield from NAMED.finditer(text)
        return
    for name in _NAME_PREFIXES:
        at = folded.find(name)
        while at >= 0:
            found = NAMED.match(text, at)
            if found is not None:
                yield found
            at = folded.find(name, at + 1)


def key_marker(line: str) -> bool:
    """Whether the line holds a private key's BEGIN marker."""
    return any(marker.search(line) for marker in KEY_MARKERS)


def _merged(found: list[Hit]) -> list[Hit]:
    out: list[Hit] = []
    for hit in sorted(found, key=lambda h: (h.start, -h.end)):
        if out and hit.start < out[-1].end:
            last = out[-1]
            out[-1] = Hit(last.start, max(last.end, hit.end), last.kind)
            continue
        out.append(hit)
    return out


def masked_line(line: str, values: Sequence[str], mask: str, kinds: bool = False) -> str:
    """The line with every hit replaced by ``mask`` (with ``kinds``, followed by the
    hit's kind: ``kind_mask``)."""
    out, pos = [], 0
    for hit in hits(line, values):
        out += [line[pos : hit.start], kind_mask(hit.kind) if kinds else mask]
        pos = hit.end
    return "".join(out) + line[pos:] if out else line


# -- what a mask says was there -------------------------------------------------------

KINDS = frozenset({*(shape.kind for shape in SHAPES), CONFIGURED, NAMED_VALUE, PRIVATE_KEY})
_KIND_MASK = re.compile(re.escape(MASK) + r"(?:\(([^()\n]{1,80})\))?")


def kind_mask(kind: str) -> str:
    """The mask a proposal's secret becomes (runs.proposers.MaskingProposer): it says
    what kind of secret was there, never which, so a scan of the workspace after it
    (common.secret_scan) still names the kind."""
    return f"{MASK}({kind})"


def masked_kinds(line: str) -> list[str]:
    """The kinds the masks in ``line`` name; a mask naming none of the detector's
    kinds (an older mask, or words a model wrote after one) is a ``masked secret``."""
    return [found[1] if found[1] in KINDS else MASKED for found in _KIND_MASK.finditer(line)] if MASK in line else []


# -- secrets written so that no rule above sees them within one line ----------------
# The publish scan reads these too (common.secret_scan); masking does not: decoding
# every base64-looking run of every stored value would cost each checkpoint, and a
# value found this way is rarely the run's own. Each finding names the rule's kind
# and how it was hidden.

_REVERSED_PREFIXES = tuple(prefix[::-1] for prefix in _PREFIXES)
_FOLDED_REVERSED_PREFIXES = tuple(prefix[::-1] for prefix in _FOLDED_PREFIXES)
_SEAM = 256
SPLIT = " (split)"
SPLIT_ACROSS = " (split across lines)"
REVERSED = " (reversed)"
BASE64 = " (base64)"
HEX_NAMED = "hex value next to a credential name"
RANDOM_BASE64 = "random base64 string"
# detect-secrets' default limit for its base64 high-entropy strings: random base64 of
# 32 characters measures about 4.8, English and identifiers about 4.
RANDOM_BASE64_ENTROPY = 4.5
# Hex digits measure at most 4 bits; a hex key of 20 or more digits at least 3.
HEX_ENTROPY = 3.0

# Adjacent literals made one ("ab" + "cd", 'ab' 'cd', "ab" . "cd", "ab" || "cd", "ab", "cd").
_JOINS = re.compile(r"""["']\s*(?:\+|\.|\|\||,)?\s*["']""")
_BASE64_RUN = re.compile(r"(?<![A-Za-z0-9+/_=-])[A-Za-z0-9+/_-]{16,}={0,2}(?![A-Za-z0-9+/=_-])")
# A quoted literal that is nothing but base64 (a subresource hash, ``sha512-...``, is
# the digest of a public file).
_QUOTED_BASE64 = re.compile(r"""(["'])(?!sha(?:256|384|512)-)([A-Za-z0-9+/_-]{32,}={0,2})\1""")


def hidden(line: str, values: Sequence[str] = (), plain: Sequence[str] = ()) -> list[tuple[str, str]]:
    """(kind, secret) of what ``line`` hides from ``hits``: literals split in two, a
    reversed token, base64 of a secret, a random base64 literal, a hex value next to
    a credential name. What ``hits`` finds as it is (``plain``: its secrets), is left
    to it."""
    found: list[tuple[str, str]] = []
    joined = _JOINS.sub("", line)
    if joined != line:
        found += [(kind + SPLIT, secret) for kind, secret in _secrets(joined, values) if secret not in line]
    folded = line.lower()
    # A reversed secret holds a rule's prefix reversed (a name next to a value reversed says nothing).
    if (
        any(prefix in line for prefix in _REVERSED_PREFIXES)
        or any(prefix in folded for prefix in _FOLDED_REVERSED_PREFIXES)
        or any(value[::-1] in line for value in values)
    ):
        found += [(kind + REVERSED, secret) for kind, secret in _secrets(line[::-1], values) if kind != NAMED_VALUE]
    for run in _BASE64_RUN.finditer(line):
        text = _decoded(run.group())
        if text is not None and might_hold(text, values):
            found += [(kind + BASE64, secret) for kind, secret in _secrets(text, values)]
    for quoted in _QUOTED_BASE64.finditer(line):
        value = quoted[2]
        if _decoded(value) is None and _mixed(value) and entropy(value) >= RANDOM_BASE64_ENTROPY:
            found.append((RANDOM_BASE64, value))
    for named in _named(line, folded):
        value = named["value"]
        digits = value.replace("-", "")
        if _HEX_ID.fullmatch(value) and len(digits) >= 20 and _mixed(digits, upper=False) and entropy(digits) >= HEX_ENTROPY:
            found.append((HEX_NAMED, value))
    unique = dict.fromkeys(found)
    return [(kind, secret) for kind, secret in unique if not any(secret in p or p in secret for p in plain)]


def split_across(first: str, second: str, values: Sequence[str] = ()) -> list[tuple[str, str]]:
    """(kind, secret) of what two consecutive lines hide between them: the end of
    ``first`` and the start of ``second`` read as one (a continuation's backslash,
    the indentation and a concatenation of literals taken out)."""
    # A secret is shorter than this on each side of the seam.
    head, tail = first.rstrip().removesuffix("\\").rstrip()[-_SEAM:], second.lstrip()[:_SEAM]
    joined = _JOINS.sub("", head + tail)
    if not might_hold(joined, values):
        return []
    alone = (_JOINS.sub("", head), _JOINS.sub("", tail))
    # What either line holds as it is (whole, or a rule's hit the join only lengthens) is its own finding.
    plain = [secret for part in alone for _, secret in _secrets(part, values)]
    return [
        (kind + SPLIT_ACROSS, secret)
        for kind, secret in _secrets(joined, values)
        if not any(secret in part for part in alone) and not any(p in secret for p in plain)
    ]


# Where a line ends, read as the seam ``split_across`` joins.
_LINE_SEAM = re.compile(r"[ \t]*\\?[ \t]*\n[ \t]*")


def suspicious(text: str, values: Sequence[str] = ()) -> bool:
    """Whether some line of ``text`` (lines joined by "\\n") or two consecutive ones
    may hold something ``hits``, ``hidden`` or ``split_across`` find, or a mask; False
    is exact (each rule's cheap part reads the lines together), True may be a false
    alarm that costs a look at each line."""
    if MASK in text or might_hold(text, values) or might_hold(_JOINS.sub("", text), values):
        return True
    if might_hold(_JOINS.sub("", _LINE_SEAM.sub("", text)), values):
        return True
    return bool(hidden(text, values))


def _secrets(text: str, values: Sequence[str]) -> list[tuple[str, str]]:
    return [(hit.kind, text[hit.start : hit.end]) for hit in hits(text, values)] if might_hold(text, values) else []


def _mixed(value: str, upper: bool = True) -> bool:
    """Letters and digits (with ``upper``: both cases of letters), as a key has."""
    return any(c.isdigit() for c in value) and (
        any(c.islower() for c in value) and any(c.isupper() for c in value) if upper else any(c.isalpha() for c in value)
    )


def _decoded(run: str) -> str | None:
    """The text a base64 (or base64url) run stands for, or None when it is not
    base64 of printable text."""
    alphabet = b"-_" if "-" in run or "_" in run else None
    if alphabet is not None and ("+" in run or "/" in run):
        return None
    padded = run + "=" * (-len(run.rstrip("=")) % 4 if "=" not in run else 0)
    try:
        data = base64.b64decode(padded, altchars=alphabet, validate=True)
        text = data.decode("utf-8")
    except (ValueError, binascii.Error):
        return None
    return text if all(c.isprintable() or c in "\t\n\r" for c in text) else None
