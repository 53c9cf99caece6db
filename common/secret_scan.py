"""The secret scan of a change: the diff a reviewer is shown, and the message that
goes with it, read with the one detector (``common.secret_detector``) before the
approval is asked and again just before the push.

A finding names the file, the line in the file as changed (for the message, its line
in the message), the kind of secret and a fingerprint: a keyed digest (HMAC-SHA256
under the server's key) of the kind and the secret, the same for the same secret in
every run on this server, so a policy can list a known false positive by file and
fingerprint, and never the secret itself, which a plain digest of a short configured
password could give back to anyone who tries candidates.

Only what a change adds is read: a removed line leaves with the change. Each line is
read by the detector's rules as written and for what it hides (split, reversed,
base64, ...), and each two consecutive lines of a file or of the message as one. A
secret the model wrote was masked when it was proposed (common.redact), with the
kind found in the unmasked proposal in the mask (``[redacted](AWS access key id)``):
such a line is a finding of that kind (``masked secret`` when the mask names none),
as is a private key whose body was masked (its markers stay). Django-free, so the
sandbox's publish uses it as it is."""

from __future__ import annotations

import hashlib
import hmac
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from common.secret_detector import PRIVATE_KEY, hidden, hits, key_marker, masked_kinds, might_hold, split_across, suspicious
from core.patchtext import read_patch

MESSAGE = "(message)"  # the file name a finding in the message is given
_BLOCK = 32  # lines looked at together first
_KEY_END = re.compile(r"-----END [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----")


@dataclass(frozen=True)
class SecretFinding:
    path: str
    line: int
    kind: str
    fingerprint: str

    def as_json(self) -> dict[str, str | int]:
        return {"path": self.path, "line": self.line, "kind": self.kind, "fingerprint": self.fingerprint}

    @property
    def bound(self) -> str:
        """What an approved effect records of the finding (core.effects): the file
        and the fingerprint, which do not move when unrelated lines do."""
        return f"{self.path}#{self.fingerprint}"


@dataclass(frozen=True)
class SecretScanner:
    # Each line of each configured secret value (runs.persistence.artifacts.line_secrets).
    values: Sequence[str] = ()
    # The server's key for the fingerprints (its SECRET_KEY).
    key: bytes = field(default=b"harness", repr=False)

    def fingerprint(self, kind: str, secret: str) -> str:
        digest = hmac.new(self.key, f"{kind}\0{secret}".encode("utf-8", "surrogateescape"), hashlib.sha256)
        return digest.hexdigest()[:16]

    def scan(self, diff: str, message: str = "") -> list[SecretFinding]:
        """The findings in ``message`` and in the lines ``diff`` adds, in order."""
        lines = enumerate(message.split("\n"), start=1)
        return self._found([(MESSAGE, number, line) for number, line in lines]) + self._found(added_lines(diff))

    def _found(self, lines: Sequence[tuple[str, int, str]]) -> list[SecretFinding]:
        out: list[tuple[int, SecretFinding]] = []  # with the index of the line it is on
        key: tuple[int, str, int, list[str]] | None = None  # a private key being read: where, and its lines
        for first in range(0, len(lines), _BLOCK):
            block = range(first, min(first + _BLOCK, len(lines)))
            # A block (with the line after it, for the seam) in which nothing may
            # be found is passed over whole: most of a large change.
            if key is None and not suspicious("\n".join(line for _, _, line in lines[first : block.stop + 1]), self.values):
                continue
            for at in block:
                path, number, line = lines[at]
                if key is not None and (key[1] != path or _KEY_END.search(line)):
                    key[3].append(line)
                    out.append((key[0], self._finding(key[1], key[2], PRIVATE_KEY, "\n".join(key[3]))))
                    key = None
                    continue
                if key is not None:
                    key[3].append(line)
                    continue
                out += [(at, self._finding(path, number, kind, secret)) for kind, secret in self._in_line(line)]
                if at + 1 < len(lines) and lines[at + 1][0] == path and lines[at + 1][1] == number + 1:
                    between = split_across(line, lines[at + 1][2], self.values)
                    out += [(at, self._finding(path, number, kind, secret)) for kind, secret in between]
                if key_marker(line):
                    key = (at, path, number, [line])
        if key is not None:
            out.append((key[0], self._finding(key[1], key[2], PRIVATE_KEY, "\n".join(key[3]))))
        return [finding for _, finding in sorted(out, key=lambda pair: pair[0])]

    def _in_line(self, line: str) -> list[tuple[str, str]]:
        """(kind, secret) of each finding within ``line``."""
        found = [(hit.kind, line[hit.start : hit.end]) for hit in hits(line, self.values)] if might_hold(line, self.values) else []
        plain = [secret for _, secret in found]
        # A secret the model wrote was masked when it was proposed, the mask naming
        # its kind: the change holds the mask, no file anyone meant to ship.
        return found + [(kind, line) for kind in masked_kinds(line)] + hidden(line, self.values, plain)

    def _finding(self, path: str, line: int, kind: str, secret: str) -> SecretFinding:
        return SecretFinding(path, line, kind, self.fingerprint(kind, secret))


def added_lines(diff: str) -> list[tuple[str, int, str]]:
    """(file, line number in the changed file, text) of each line a diff adds, as the
    applier reads it (core.patchtext.read_patch, the one reader of diff text): what
    is scanned is what is shown and what is applied."""
    return [(line.path, line.new_no or 0, line.text) for line in read_patch(diff) if line.kind == "added"]
