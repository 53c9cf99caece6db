"""The one writer of the decision ledger: ``record`` (docs/design.md, Decision ledger).

Called by the code that makes a decision, inside the transaction that makes it, so the
entry commits or rolls back with the decision: a decision not in the ledger did not
happen. Each entry joins two chains, the global one and its project's; a chain's
writers are ordered by the chain's ``Head`` row (see ``_claim``).

Locks. Every writer claims the heads it needs in one order (the global chain's, then
each project's by ascending id) and only at the end of its decision: a transaction that
records decisions about several runs (a policy save lapsing their requests, a project's
"stop all") takes each run's row lock first and the heads last, inside ``batch``. A
checkpoint takes its run's row lock, then the heads. So nobody holding a head waits for
a run's row, and the heads cannot close a cycle of waits."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from django.db import DEFAULT_DB_ALIAS, connections, transaction
from django.utils import timezone

from common.metrics import LEDGER_ENTRIES
from ledger.models import GLOBAL_CHAIN, Content, Entry, Head, project_chain
from ledger.verify import GENESIS, VERSION, canonical, entry_digest, sha256

__all__ = ["Actor", "Decision", "Shown", "batch", "keep", "person", "record", "rule", "system", "through_token", "token_of"]


@dataclass(frozen=True)
class Actor:
    """Who decided: a person (``user``), a person through an API token (``token``), a
    policy rule (``rule``: its name; the entry holds the policy version) or Harness
    itself (``system``: the beat's expiry, a run's own consumption)."""

    kind: str
    name: str
    id: str = ""

    def as_json(self) -> dict[str, str]:
        return {"kind": self.kind, "name": self.name, "id": self.id}


_THROUGH = "_ledger_through_token"


def through_token(user: Any, label: str, token_id: object) -> None:
    """Mark ``user`` (this request's user object alone) as acting through an API token:
    the entries of what they decide name the token (api.authentication)."""
    setattr(user, _THROUGH, (label, str(token_id)))


def token_of(user: Any) -> str:
    """The API token ``user`` acts through on this request ("" for none)."""
    token = getattr(user, _THROUGH, None)
    return str(token[0]) if token is not None else ""


def person(user: Any) -> Actor:
    """The person deciding, or the token they decide through; Harness for nobody."""
    if user is None or not getattr(user, "is_authenticated", False):
        return system("harness")
    token = getattr(user, _THROUGH, None)
    if token is not None:
        return Actor("token", f"{user.get_username()} ({token[0]})", token[1])
    return Actor("user", str(user.get_username()), str(user.pk))


def rule(name: str) -> Actor:
    return Actor("rule", name)


def system(what: str) -> Actor:
    return Actor("system", what)


@dataclass(frozen=True)
class Shown:
    """What a decider was shown, as the canonical bytes the entry's ``shown`` digest is
    over. ``keep``: the bytes are kept (ledger.models.Content) for exports until
    retention forgets them. ``named``: content kept by whoever showed it (``keep``),
    named here by its digest alone."""

    canonical: bytes = b""
    keep: bool = True
    named: str = ""

    @classmethod
    def of(cls, value: Any, *, keep: bool = True) -> Shown:
        return cls(canonical(value), keep)

    @classmethod
    def kept_elsewhere(cls, digest: str) -> Shown:
        return cls(keep=False, named=digest)

    @property
    def digest(self) -> str:
        return self.named or sha256(self.canonical)


def keep(shown: Shown) -> None:
    """Keep what a decider is being shown, in the caller's transaction, before the
    decision naming it (``Shown.kept_elsewhere``) is recorded."""
    Content.objects.bulk_create(
        [Content(digest=shown.digest, body=shown.canonical.decode("utf-8"), kept_at=timezone.now())], ignore_conflicts=True
    )


@dataclass(frozen=True)
class Decision:
    """One decision to record: its kind (``gate.allowed``, ``approval.granted``,
    ``admin.policy_saved``...), who made it, what was decided and what they were shown."""

    kind: str
    actor: Actor
    decided: Mapping[str, Any]
    shown: Shown
    project_id: int | None = None
    run_id: str = ""
    policy_version: int | None = None
    at: datetime | None = field(default=None, compare=False)


log = logging.getLogger(__name__)

_pending: ContextVar[list[Decision] | None] = ContextVar("ledger_pending", default=None)


def record(*decisions: Decision) -> None:
    """Record ``decisions``, in the caller's transaction: now, or inside ``batch`` at
    its end."""
    pending = _pending.get()
    if pending is not None:
        pending.extend(decisions)
        return
    _write(decisions)


@contextmanager
def batch(*, savepoint: bool = True) -> Iterator[None]:
    """A transaction (``transaction.atomic``) whose decisions are all recorded at its
    end, after every other lock it takes (see the module's note). A batch inside a batch
    is part of the outer one's, and forgets what it recorded if it fails (as its
    savepoint does); a plain ``atomic`` block that rolls back inside a batch must record
    no decision."""
    outer = _pending.get()
    if outer is not None:
        mark = len(outer)
        try:
            with transaction.atomic(savepoint=savepoint):
                yield
        except BaseException:
            del outer[mark:]
            raise
        return
    pending: list[Decision] = []
    token = _pending.set(pending)
    reset = False
    try:
        with transaction.atomic(savepoint=savepoint):
            yield
            # Written by this batch, not queued again by itself.
            _pending.reset(token)
            reset = True
            _write(pending)
    finally:
        if not reset:
            _pending.reset(token)


def _write(decisions: Sequence[Decision]) -> list[Entry]:
    if not decisions:
        return []
    connection = connections[DEFAULT_DB_ALIAS]
    projects = sorted({d.project_id for d in decisions if d.project_id is not None})
    chains = [GLOBAL_CHAIN, *(project_chain(p) for p in projects)]
    counts = {GLOBAL_CHAIN: len(decisions)}
    for decision in decisions:
        if decision.project_id is not None:
            chain = project_chain(decision.project_id)
            counts[chain] = counts.get(chain, 0) + 1
    with transaction.atomic(savepoint=False):
        # The heads in the one order every writer takes them in: global, then projects by id.
        heads = {chain: _claim(connection, chain, counts[chain]) for chain in chains}
        now = timezone.now()
        rows: list[Entry] = []
        for decision in decisions:
            fields = _fields(decision, heads, now)
            rows.append(_row(fields))
        kept = {d.shown.digest: d.shown.canonical for d in decisions if d.shown.keep}
        if kept:
            Content.objects.bulk_create(
                [Content(digest=digest, body=body.decode("utf-8"), kept_at=now) for digest, body in kept.items()], ignore_conflicts=True
            )
        Entry.objects.bulk_create(rows)
        for chain, (seq, digest) in heads.items():
            # The head moves to the last entry written; its row lock, taken by _claim,
            # is still this transaction's.
            Head.objects.filter(chain=chain).update(seq=seq, digest=digest)
        transaction.on_commit(lambda: _count(decisions))
    return rows


def _count(decisions: Sequence[Decision]) -> None:
    """The Prometheus counters (docs/design.md, Metrics), once the entries are committed;
    a failure to count never fails a decision."""
    try:
        for decision in decisions:
            LEDGER_ENTRIES.labels(decision.kind).inc()
    except Exception:
        log.exception("counting the ledger's entries failed")


def _claim(connection: Any, chain: str, count: int) -> list[Any]:
    """Claim ``count`` seqs of ``chain``: ``[last seq before them, its digest]``, and the
    chain's head row locked until this transaction ends.

    The claim is one conditional UPDATE of the head row that returns it. On PostgreSQL
    the UPDATE takes the row's lock (a concurrent writer's UPDATE of the same row waits
    for this transaction to end, then re-reads the row as that one left it, so it links
    to the entries just written); on SQLite the UPDATE makes this transaction the
    database's one writer until it ends. A chain's first writer finds no row: it inserts
    one (a concurrent first insert of the same chain does nothing, after waiting for the
    other to commit) and claims that."""
    quote = connection.ops.quote_name
    table = quote(Head._meta.db_table)
    update = (
        f"UPDATE {table} SET {quote('seq')} = {quote('seq')} + %s WHERE {quote('chain')} = %s RETURNING {quote('seq')}, {quote('digest')}"  # noqa: S608 - quoted identifiers; values are parameters
    )
    with connection.cursor() as cursor:
        cursor.execute(update, [count, chain])
        found = cursor.fetchone()
        if found is None:
            Head.objects.bulk_create([Head(chain=chain, seq=0, digest=GENESIS)], ignore_conflicts=True)
            cursor.execute(update, [count, chain])
            found = cursor.fetchone()
    # [the last seq before this writer's, its digest]: advanced entry by entry by _fields.
    return [int(found[0]) - count, str(found[1])]


def _fields(decision: Decision, heads: dict[str, list[Any]], now: datetime) -> dict[str, Any]:
    """The entry's fields in the export's names (ledger.verify.HASHED), its digest, and
    the heads moved on past it."""
    at = decision.at or now
    fields: dict[str, Any] = {
        "v": VERSION,
        "seq": None,
        "prev": None,
        "project": decision.project_id,
        "project_seq": None,
        "project_prev": None,
        "at": timestamp(at),
        "actor": decision.actor.as_json(),
        "policy_version": decision.policy_version,
        "run": decision.run_id,
        "kind": decision.kind,
        "decided": dict(decision.decided),
        "shown": decision.shown.digest,
    }
    chained = [("seq", "prev", heads[GLOBAL_CHAIN])]
    if decision.project_id is not None:
        chained.append(("project_seq", "project_prev", heads[project_chain(decision.project_id)]))
    for seq_name, prev_name, head in chained:
        fields[seq_name] = head[0] + 1
        fields[prev_name] = head[1]
    # The decided values as the canonical text stores and reads them back.
    fields["decided"] = decided_value(canonical(fields["decided"]).decode("utf-8"))
    fields["digest"] = entry_digest(fields)
    for _seq_name, _prev_name, head in chained:
        head[0] += 1
        head[1] = fields["digest"]
    return fields


def _row(fields: Mapping[str, Any]) -> Entry:
    actor = fields["actor"]
    return Entry(
        seq=fields["seq"],
        prev=fields["prev"],
        project_id=fields["project"],
        project_seq=fields["project_seq"],
        project_prev=fields["project_prev"],
        at=datetime.strptime(fields["at"], TIME_FORMAT).replace(tzinfo=UTC),
        actor_kind=actor["kind"],
        actor=actor["name"],
        actor_id=actor["id"],
        policy_version=fields["policy_version"],
        run_id=fields["run"],
        kind=fields["kind"],
        decided=canonical(fields["decided"]).decode("utf-8"),
        shown=fields["shown"],
        digest=fields["digest"],
    )


TIME_FORMAT = "%Y-%m-%dT%H:%M:%S.%fZ"


def timestamp(at: datetime) -> str:
    """An entry's time as its digest covers it: UTC, to the microsecond the databases keep."""
    return at.astimezone(UTC).strftime(TIME_FORMAT)


def decided_value(text: str) -> Any:
    return json.loads(text)


def exported(entry: Entry, content: str | None = None) -> dict[str, Any]:
    """An entry as an export's line holds it: the fields its digest covers, the digest,
    and (where retention kept it) the content ``shown`` is the digest of."""
    line: dict[str, Any] = {
        "v": VERSION,
        "seq": entry.seq,
        "prev": entry.prev,
        "project": entry.project_id,
        "project_seq": entry.project_seq,
        "project_prev": entry.project_prev,
        "at": timestamp(entry.at),
        "actor": {"kind": entry.actor_kind, "name": entry.actor, "id": entry.actor_id},
        "policy_version": entry.policy_version,
        "run": entry.run_id,
        "kind": entry.kind,
        "decided": decided_value(entry.decided),
        "shown": entry.shown,
        "digest": entry.digest,
    }
    if content is not None:
        line["content"] = content
    return line
