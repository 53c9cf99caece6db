"""The decision ledger's chain, in plain Python: the canonical encoding of an entry,
its digest, and the offline verification of an export (docs/design.md, Decision ledger). Nothing here imports Django, the project's settings or anything outside the
standard library, so whoever holds an export checks it with this one file:

    python3 -m ledger.verify ledger.jsonl [--head DIGEST | --head SEQ:DIGEST]
    python3 ledger/verify.py ledger.jsonl           # the file alone, copied anywhere
    python3 -m ledger.verify project.jsonl --project ID   # one project's export

An export is JSON Lines, one entry a line in the global chain's order. Each entry is
in two chains at once: the global chain (``seq``, ``prev``) and its project's chain
(``project_seq``, ``project_prev``; none for a decision of no project). Its ``digest``
is the SHA-256 of the canonical JSON of every field but ``digest`` and ``content``
(``HASHED``), so the digest of the one before is inside it: changing, removing,
inserting or reordering any entry breaks a digest or a link after it, and verification
names the first entry where that happens. ``shown`` is the digest of the canonical
bytes the decider was shown (the approval page's content, the rule's inputs, the
admin's change); ``content``, where retention kept it, is those bytes as text, and is
checked against ``shown``. A removal at the end of the chain breaks no link: the head
published on a schedule (``--head``) finds it."""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

# The digest before a chain's first entry.
GENESIS = ""
VERSION = 1
# What an entry's digest covers, in the export's own names.
HASHED = (
    "v",
    "seq",
    "prev",
    "project",
    "project_seq",
    "project_prev",
    "at",
    "actor",
    "policy_version",
    "run",
    "kind",
    "decided",
    "shown",
)


# One encoder for every call: json.dumps with these options would build a new one each
# time (it reuses its own only for the default options), which costs more than encoding
# an entry's small values.
_encoder = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
# And where the interpreter has json's C encoder, that encoder made once: the
# JSONEncoder makes a new one on each call, about half the cost of encoding a
# decision's values. The same text; without the circular check (a value holding
# itself fails by recursion rather than by ValueError), as a shared check's record of
# the containers it is inside would outlive an encoding that failed.
_made = json.encoder.c_make_encoder  # type: ignore[attr-defined]  # json.encoder's own, missing from typeshed
_c_encode = None if _made is None else _made(None, _encoder.default, json.encoder.encode_basestring, None, ":", ",", True, False, False)


def canonical(value: Any) -> bytes:
    """The one encoding every digest of the ledger is over: JSON with sorted keys, no
    spaces, UTF-8, no NaN (the same as ``core.jsonutil.canonical_json``)."""
    if _c_encode is None:
        return _encoder.encode(value).encode("utf-8")
    return "".join(_c_encode(value, 0)).encode("utf-8")


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def content_digest(value: Any) -> str:
    """The digest of what a decider was shown, given as the value its canonical bytes encode."""
    return sha256(canonical(value))


def entry_digest(entry: Mapping[str, Any]) -> str:
    """An entry's own digest: over the canonical JSON of its ``HASHED`` fields."""
    return sha256(canonical({name: entry.get(name) for name in HASHED}))


@dataclass(frozen=True)
class Problem:
    """The first thing wrong with an export: what (``altered``, ``removed``, ``inserted``,
    ``reordered``, ``truncated``, ``malformed``), which entry (its seq in the chain
    named), and in words."""

    what: str
    chain: str
    seq: int | None
    words: str

    def __str__(self) -> str:
        return f"{self.what}: {self.words}"


@dataclass(frozen=True)
class Head:
    """A published head: the digest of a chain's last entry, and its seq when known."""

    digest: str
    seq: int | None = None

    @classmethod
    def parse(cls, text: str) -> Head:
        seq, _, digest = text.strip().rpartition(":")
        return cls(digest, int(seq) if seq else None)


@dataclass(frozen=True)
class _Chain:
    """One chain's view of the entries: which field is its seq, which its link."""

    name: str
    seq: str
    prev: str

    def label(self, entry: Mapping[str, Any]) -> str:
        where = f"entry {entry.get(self.seq)}"
        if self.seq != "seq":
            where += f" (global entry {entry.get('seq')})"
        return f"{self.name}'s {where}" if self.seq != "seq" else where


GLOBAL = _Chain("the global chain", "seq", "prev")


def _project_chain(project: Any) -> _Chain:
    return _Chain(f"project {project}'s chain", "project_seq", "project_prev")


def read_lines(lines: Iterable[str]) -> tuple[list[dict[str, Any]], Problem | None]:
    """The entries of an export, or the first line that is not one."""
    entries: list[dict[str, Any]] = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            entry = json.loads(line)
        except ValueError as exc:
            return entries, Problem("malformed", "the export", None, f"line {number} is not JSON ({exc})")
        if not isinstance(entry, dict) or not isinstance(entry.get("seq"), int) or not isinstance(entry.get("digest"), str):
            return entries, Problem("malformed", "the export", None, f"line {number} is not a ledger entry")
        entries.append(entry)
    return entries, None


def verify(entries: Sequence[Mapping[str, Any]], head: Head | None = None, project: Any = None) -> Problem | None:
    """The first problem with ``entries`` (a whole export, in its order), or None when
    every entry is what its digest says, every link holds in the global chain and in
    each project's chain, every kept content is what the entry says was shown and, with
    ``head``, the chain ends at the published head.

    With ``project``, ``entries`` are one project's export (``manage.py ledger export
    --project``): that project's chain alone, in its order, checked the same way (the
    global chain's links run through other projects' entries, which it does not hold),
    and ``head`` is that project's head."""
    if project is not None:
        chain = _project_chain(project)
        stray = next((e for e in entries if e.get("project") != project), None)
        if stray is not None:
            return Problem("malformed", chain.name, None, f"{GLOBAL.label(stray)} is not of project {project}")
        for check in (_self_checks, lambda found: _links(chain, found)):
            problem = check(entries)
            if problem is not None:
                return problem
        return _against_head(entries, head, chain) if head is not None else None
    for check in (_self_checks, _global_links, _project_links):
        problem = check(entries)
        if problem is not None:
            return problem
    return _against_head(entries, head) if head is not None else None


def _self_checks(entries: Sequence[Mapping[str, Any]]) -> Problem | None:
    """Each entry's digest over its own fields, and its content's over the content."""
    for entry in entries:
        recorded = entry.get("digest")
        if entry_digest(entry) != recorded:
            return _explain_altered(entry, entries)
        content = entry.get("content")
        if content is not None and sha256(str(content).encode("utf-8")) != entry.get("shown"):
            return Problem(
                "altered",
                GLOBAL.name,
                entry.get("seq"),
                f"{GLOBAL.label(entry)} was altered: the content kept of what its decider was shown is not what the entry's digest of it says",
            )
    return None


def _explain_altered(entry: Mapping[str, Any], entries: Sequence[Mapping[str, Any]]) -> Problem:
    """An entry whose fields do not give its digest. When they would at another seq, the
    entry was moved there: swapped with the entry now at that seq (which would be
    valid at this one), or renumbered after an insertion or a removal."""
    seq = entry.get("seq")
    seqs = [e.get("seq") for e in entries]
    if isinstance(seq, int):
        for other in sorted({s for s in seqs if isinstance(s, int)} | {seq - 1, seq + 1}, key=lambda s: abs(s - seq)):
            if other == seq or other < 1:
                continue
            moved = {**entry, "seq": other}
            if entry_digest(moved) != entry.get("digest"):
                continue
            swapped = [e for e in entries if e.get("seq") == other and entry_digest({**e, "seq": seq}) == e.get("digest")]
            if swapped:
                return Problem("reordered", GLOBAL.name, other, f"entry {other} was moved to position {seq} (reordered)")
            if other == seq - 1:
                return Problem(
                    "inserted",
                    GLOBAL.name,
                    seq - 1,
                    f"entry {seq - 1} was inserted: the entry now numbered {seq} was recorded as {seq - 1} (the entries after the insertion were renumbered)",
                )
            if other == seq + 1:
                return Problem(
                    "removed",
                    GLOBAL.name,
                    seq,
                    f"entry {seq} was removed: the entry now numbered {seq} was recorded as {seq + 1} (the entries after the removal were renumbered)",
                )
            return Problem("reordered", GLOBAL.name, other, f"entry {other} was moved to position {seq} (reordered)")
    return Problem("altered", GLOBAL.name, seq, f"entry {seq} was altered: its fields do not give its digest")


def _global_links(entries: Sequence[Mapping[str, Any]]) -> Problem | None:
    return _links(GLOBAL, entries)


def _project_links(entries: Sequence[Mapping[str, Any]]) -> Problem | None:
    projects: dict[Any, list[Mapping[str, Any]]] = {}
    for entry in entries:
        if entry.get("project") is not None:
            projects.setdefault(entry.get("project"), []).append(entry)
    for project, chain in projects.items():
        problem = _links(_project_chain(project), chain)
        if problem is not None:
            return problem
    return None


def _links(chain: _Chain, entries: Sequence[Mapping[str, Any]]) -> Problem | None:
    """Each entry, in the export's order, follows the one before in ``chain``: its seq
    is the next, and its link is the digest of the one before."""
    later: dict[Any, int] = {}
    for index, entry in enumerate(entries):
        later.setdefault(entry.get(chain.seq), index)
    seen: dict[Any, Mapping[str, Any]] = {}
    last_seq, last_digest = 0, GENESIS
    for index, entry in enumerate(entries):
        seq = entry.get(chain.seq)
        if not isinstance(seq, int):
            return Problem("malformed", chain.name, None, f"{chain.label(entry)} has no number in {chain.name}")
        if seq == last_seq + 1:
            if entry.get(chain.prev) == last_digest:
                seen[seq] = entry
                last_seq, last_digest = seq, str(entry.get("digest"))
                continue
            before = seen.get(last_seq - 1)
            if before is not None and entry.get(chain.prev) == before.get("digest"):
                # It links past the entry before it: that one was inserted (its seq
                # taken from this one, which was renumbered to make room).
                return Problem(
                    "inserted", chain.name, last_seq, f"{chain.label(seen[last_seq])} was inserted: the entry after it links past it"
                )
            return Problem(
                "altered",
                chain.name,
                last_seq,
                f"{chain.label(seen[last_seq]) if last_seq in seen else 'the chain start'} was altered: "
                f"{chain.label(entry)} links to an entry with another digest (its own digest was recomputed)",
            )
        if seq > last_seq + 1:
            missing = range(last_seq + 1, seq)
            out_of_order = [s for s in missing if later.get(s, -1) > index]
            if out_of_order:
                return Problem(
                    "reordered", chain.name, out_of_order[0], f"entry {out_of_order[0]} of {chain.name} comes after entry {seq} (reordered)"
                )
            first = missing[0]
            span = f"entry {first}" if len(missing) == 1 else f"entries {first} to {missing[-1]}"
            return Problem("removed", chain.name, first, f"{span} of {chain.name} removed: {chain.label(entry)} follows entry {last_seq}")
        # A seq at or before the last one: a second entry with a seq taken, or one out of place.
        if seq in seen:
            first_seen = seen[seq]
            following = next((e for e in entries[index + 1 :] if e.get(chain.seq) == seq + 1), None)
            inserted_is_earlier = following is not None and following.get(chain.prev) == entry.get("digest")
            inserted = first_seen if inserted_is_earlier else entry
            return Problem(
                "inserted",
                chain.name,
                seq,
                f"{chain.label(inserted)} (digest {str(inserted.get('digest'))[:16]}…) was inserted: a second entry numbered {seq}",
            )
        return Problem("reordered", chain.name, seq, f"entry {seq} of {chain.name} comes after entry {last_seq} (reordered)")
    return None


def _against_head(entries: Sequence[Mapping[str, Any]], head: Head, chain: _Chain = GLOBAL) -> Problem | None:
    """The published head is the last entry's digest: an entry removed from the end (or
    the whole tail) no link shows, and one added after it, are found here."""
    last = entries[-1] if entries else None
    if last is not None and last.get("digest") == head.digest:
        return None
    found = next((e for e in entries if e.get("digest") == head.digest), None)
    if found is not None:
        after = int(found[chain.seq]) + 1
        return Problem(
            "inserted", chain.name, after, f"entry {after} and any after it were added after the published head (entry {found[chain.seq]})"
        )
    last_seq = int(last[chain.seq]) if last is not None else 0
    if head.seq is not None and head.seq > last_seq:
        span = f"entry {last_seq + 1}" if head.seq == last_seq + 1 else f"entries {last_seq + 1} to {head.seq}"
        return Problem(
            "truncated", chain.name, last_seq + 1, f"{span} removed: the published head is entry {head.seq}, the export ends at {last_seq}"
        )
    return Problem(
        "truncated", chain.name, None, f"the published head {head.digest[:16]}… is not in the export: its end was removed or altered"
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m ledger.verify", description="Verify an export of Harness's decision ledger.")
    parser.add_argument("file", help="the export (JSON Lines), or - for standard input")
    parser.add_argument("--head", help="the published head: DIGEST or SEQ:DIGEST; the chain must end there")
    parser.add_argument("--project", type=int, help="the export is this project's chain alone (its id): ledger export --project")
    args = parser.parse_args(argv)
    if args.file == "-":
        entries, problem = read_lines(sys.stdin)
    else:
        with open(args.file, encoding="utf-8") as handle:
            entries, problem = read_lines(handle)
    if problem is None:
        problem = verify(entries, Head.parse(args.head) if args.head else None, args.project)
    if problem is not None:
        print(f"FAILED: {problem}")
        return 1
    last = entries[-1] if entries else None
    seq = "seq" if args.project is None else "project_seq"
    ending = f", ending at entry {last[seq]} with digest {last['digest']}" if last is not None else ""
    of = "" if args.project is None else f" of project {args.project}'s chain"
    print(f"OK: {len(entries)} entries{of}, every digest and link holds{ending}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
