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
- **a private key's BEGIN marker** (detect-secrets' private key plugin's markers);
- **a random value next to a credential-like name** (``aws_secret_access_key = ...``,
  ``"client_secret": "..."``): at least 16 characters of a key alphabet, with letters
  and digits, above 4 bits of Shannon entropy (detect-secrets' measure, over its
  base64 alphabet). Values made only of hex digits and dashes are left alone: every id
  Harness keeps (commits, digests, idempotency and lease keys) has that shape, and a
  lease token masked in a checkpoint would stop the run.

Nothing here imports Django or the apps: the sandbox's publish scan uses it too."""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

from detect_secrets.plugins.aws import AWSKeyDetector
from detect_secrets.plugins.github_token import GitHubTokenDetector
from detect_secrets.plugins.gitlab_token import GitLabTokenDetector
from detect_secrets.plugins.high_entropy_strings import Base64HighEntropyString
from detect_secrets.plugins.private_key import PrivateKeyDetector
from detect_secrets.plugins.pypi_token import PypiTokenDetector
from detect_secrets.plugins.sendgrid import SendGridDetector
from detect_secrets.plugins.slack import SlackDetector
from detect_secrets.plugins.stripe import StripeDetector

MASK = "[redacted]"  # what masking puts in a secret's place (common.redact)
CONFIGURED = "configured secret value"
MASKED = "masked secret"
PRIVATE_KEY = "private key"
NAMED_VALUE = "random value next to a credential name"


@dataclass(frozen=True)
class Shape:
    kind: str
    pattern: re.Pattern[str]
    # Literal strings one of which every match holds (case as given; ``folded``: in
    # the lowercased text): a line holding none skips the expression, which is most
    # of masking's cost on a large state.
    prefixes: tuple[str, ...]
    folded: bool = False

    def spans(self, line: str) -> Iterable[tuple[int, int]]:
        for found in self.pattern.finditer(line):
            group = next((i for i in range(1, (found.re.groups or 0) + 1) if found.group(i)), 0)
            yield found.span(group)


def _bounded(pattern: re.Pattern[str]) -> re.Pattern[str]:
    return re.compile(r"(?<![A-Za-z0-9])(?:" + pattern.pattern + ")", pattern.flags)


def _plugin(kind: str, plugin: type, prefixes: tuple[str, ...], only: slice = slice(None)) -> list[Shape]:
    return [Shape(kind, _bounded(p), prefixes) for p in plugin.denylist[only]]  # type: ignore[attr-defined]


SHAPES: tuple[Shape, ...] = (
    *_plugin("AWS access key id", AWSKeyDetector, ("A3T", "ABIA", "ACCA", "AKIA", "ASIA"), slice(0, 1)),
    Shape("AWS secret access key", _bounded(AWSKeyDetector.denylist[1]), ("aws",), folded=True),
    *_plugin("GitHub token", GitHubTokenDetector, ("ghp_", "gho_", "ghu_", "ghs_", "ghr_")),
    *_plugin(
        "GitLab token",
        GitLabTokenDetector,
        ("glpat-", "gldt-", "glft-", "glsoat-", "glrt-", "glcbt-", "glimt-", "glptt-", "glagent-", "gloas-", "GR1348941"),
    ),
    *_plugin("Slack token", SlackDetector, ("xox", "XOX", "hooks.slack.com")),
    *_plugin("Stripe key", StripeDetector, ("k_live_",)),
    *_plugin("PyPI token", PypiTokenDetector, ("pypi-",)),
    *_plugin("SendGrid key", SendGridDetector, ("SG.",)),
    Shape("Anthropic or OpenAI key", re.compile(r"(?<![A-Za-z0-9])sk-(?:ant-)?[A-Za-z0-9_-]{16,}"), ("sk-",)),
    Shape(
        "GitHub token",
        re.compile(r"(?<![A-Za-z0-9])(?:gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,})"),
        ("ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_"),
    ),
    Shape("Google API key", re.compile(r"(?<![A-Za-z0-9])AIza[0-9A-Za-z_-]{35}"), ("AIza",)),
)
KEY_MARKERS = tuple(PrivateKeyDetector.denylist)  # what a scan reports a private key by

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
_ENTROPY = Base64HighEntropyString()
MIN_ENTROPY = 4.0


def looks_random(value: str) -> bool:
    """A value a credential name would hold: long, letters and digits, high entropy,
    and not the hex shape of Harness's own ids."""
    return (
        len(value) >= 16
        and any(c.isdigit() for c in value)
        and any(c.isalpha() for c in value)
        and _HEX_ID.fullmatch(value) is None
        and _ENTROPY.calculate_shannon_entropy(value) >= MIN_ENTROPY
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
_PREFIXES = tuple(dict.fromkeys(p for shape in SHAPES if not shape.folded for p in shape.prefixes))
_FOLDED_PREFIXES = (*dict.fromkeys(p for shape in SHAPES if shape.folded for p in shape.prefixes), "-----begin", "putty-user-key")


def might_hold(text: str, values: Sequence[str] = ()) -> bool:
    """Whether ``text`` (any text: a line, a JSON document) may hold something ``hits``
    finds; False is exact, True may be a false alarm that costs a closer look."""
    if any(value in text for value in values):
        return True
    if any(prefix in text for prefix in _PREFIXES):
        return True
    folded = text.lower()
    if any(prefix in folded for prefix in _FOLDED_PREFIXES):
        return True
    return any(looks_random(m["value"]) for m in _named(text, folded))


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
        if any(prefix in (folded if shape.folded else line) for prefix in shape.prefixes):
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


def masked_line(line: str, values: Sequence[str], mask: str) -> str:
    """The line with every hit replaced by ``mask``."""
    out, pos = [], 0
    for hit in hits(line, values):
        out += [line[pos : hit.start], mask]
        pos = hit.end
    return "".join(out) + line[pos:] if out else line
