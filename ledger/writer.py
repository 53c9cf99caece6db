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
import uuid
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from django.db import DEFAULT_DB_ALIAS, connections, transaction
from django.utils import timezone

from common.cursors import checkpoint_cursor
from common.metrics import LEDGER_ENTRIES
from ledger.models import GLOBAL_CHAIN, Content, Entry, Head, project_chain
from ledger.verify import GENESIS, HASHED, VERSION, canonical, entry_digest, sha256

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


def _write(decisions: Sequence[Decision]) -> list[tuple[int, str]]:
    """Write ``decisions``' entries (and the content they keep); ``(seq, digest)`` of each."""
    if not decisions:
        return []
    connection = connections[DEFAULT_DB_ALIAS]
    projects = sorted({d.project_id for d in decisions if d.project_id is not None})
    now = timezone.now()
    kept = {d.shown.digest: d.shown.canonical.decode("utf-8") for d in decisions if d.shown.keep}
    with transaction.atomic(savepoint=False):
        if connection.vendor == "postgresql" and len(projects) <= 1:
            written = _write_at_once(connection, decisions, projects[0] if projects else None, kept, now)
        else:
            written = _write_in_steps(connection, decisions, projects, kept, now)
        transaction.on_commit(lambda: _count(decisions))
    return written


# -- PostgreSQL, the decisions of one project (or of none): one statement -------------
#
# A checkpoint's decisions are of one run, so of one project. The statement locks both
# heads in the one order (ORDER BY chain: "global" before "project:..."; holding the
# global head excludes every other writer, so no two writers ever wait on each other's
# heads) with SELECT ... FOR UPDATE, which under READ COMMITTED returns each head as the
# writer before left it once that writer commits; chains the entries on from there
# (a recursive common table expression computing each entry's digest on the server from
# its canonical JSON, which Python gives with the four chained fields left as
# placeholders: the bytes ledger.verify.entry_digest hashes); inserts them and the
# content they keep; and moves both heads to the last entry. A chain's first writer
# finds no head row: the statement then writes nothing, and is sent again once the
# rows exist.

_MARK = f"@ledger-{uuid.uuid4().hex}-"
# The chained fields, in the order the canonical JSON's sorted keys put them.
_CHAINED = ("prev", "project_prev", "project_seq", "seq")
_MARKS = {name: f'"{_MARK}{name}"' for name in _CHAINED}


def _template(decision: Decision, project: int | None, now: datetime) -> list[str]:
    """The entry's canonical JSON split at its chained fields: five texts, the SQL
    filling each gap (an empty text where the field is inside one: none for no project)."""
    fields = _fields_unchained(decision, now)
    for name in _CHAINED:
        fields[name] = None if project is None and name.startswith("project_") else f"{_MARK}{name}"
    text = canonical({name: fields.get(name) for name in HASHED}).decode("utf-8")
    parts: list[str] = []
    for name in _CHAINED:
        before, found, after = text.partition(_MARKS[name])
        # A field not in the text (a project's, for no project) fills its gap with nothing.
        parts.append(before if found else "")
        text = after if found else text
    parts.append(text)
    return parts


def _write_at_once(
    connection: Any, decisions: Sequence[Decision], project: int | None, kept: Mapping[str, str], now: datetime
) -> list[tuple[int, str]]:
    sql = _statement_at_once(connection, len(decisions), len(kept))
    chain = project_chain(project) if project is not None else None
    params: list[object] = [GLOBAL_CHAIN, chain, chain, GLOBAL_CHAIN, 2 if chain else 1]
    for n, decision in enumerate(decisions, start=1):
        actor = decision.actor
        params += [n, *_template(decision, project, now)]
        params += [decision.at or now, actor.kind, actor.name, actor.id, decision.policy_version, decision.run_id, decision.kind]
        params += [canonical(dict(decision.decided)).decode("utf-8"), decision.shown.digest]
    params.append(project)
    for digest, body in kept.items():
        params += [digest, body, now]
    for attempt in (1, 2):
        with checkpoint_cursor(connection) as cursor:
            cursor.execute(sql, params)
            written = sorted((int(seq), str(digest)) for seq, digest in cursor.fetchall())
        if written or attempt == 2:
            break
        # A chain's first entry: its head row, made here (a concurrent first writer's
        # waits for this transaction, which holds the global head, and does nothing).
        _make_heads(connection, [GLOBAL_CHAIN, *([chain] if chain else [])])
    if len(written) != len(decisions):
        raise RuntimeError(f"the ledger wrote {len(written)} of {len(decisions)} entries")
    return written


_at_once: dict[tuple[int, int], str] = {}


def _statement_at_once(connection: Any, count: int, kept: int) -> str:
    key = (count, kept)
    found = _at_once.get(key)
    if found is not None:
        return found
    quote = connection.ops.quote_name
    head, entry, content = (quote(m._meta.db_table) for m in (Head, Entry, Content))
    given = ", ".join(
        [
            "(%s::integer, %s::text, %s::text, %s::text, %s::text, %s::text, %s::timestamptz, %s::text, %s::text, %s::text, %s::integer,"
            " %s::text, %s::text, %s::text, %s::text)"
        ]
        * count
    )

    def digest(row: str, prev: str, pprev: str, pseq: str, seq: str) -> str:
        text = (
            f"{row}.t0 || '\"' || {prev} || '\"' || {row}.t1 || coalesce('\"' || {pprev} || '\"', '') || {row}.t2"
            f" || coalesce(({pseq})::text, '') || {row}.t3 || ({seq})::text || {row}.t4"
        )
        return f"encode(sha256(convert_to({text}, 'UTF8')), 'hex')"

    columns = "seq, prev, project_id, project_seq, project_prev, at, actor_kind, actor, actor_id, policy_version, run_id, kind, decided, shown, digest"
    kept_cte = ""
    if kept:
        rows = ", ".join(["(%s::text, %s::text, %s::timestamptz)"] * kept)
        kept_cte = f", kept AS (INSERT INTO {content} (digest, body, kept_at) VALUES {rows} ON CONFLICT (digest) DO NOTHING)"  # noqa: S608 - quoted table names; values are parameters
    # Only the models' quoted table names are spliced in; every value is a parameter.
    found = _at_once[key] = (
        f"WITH RECURSIVE locked AS MATERIALIZED (SELECT chain, seq, digest FROM {head} WHERE chain IN (%s, %s) ORDER BY chain FOR UPDATE),"  # noqa: S608
        " start AS (SELECT g.seq AS seq, g.digest::text AS prev, p.seq AS pseq, p.digest::text AS pprev FROM locked g LEFT JOIN locked p ON p.chain = %s"
        " WHERE g.chain = %s AND (SELECT count(*) FROM locked) = %s),"
        " given (n, t0, t1, t2, t3, t4, at, actor_kind, actor, actor_id, policy_version, run_id, kind, decided, shown)"
        f" AS (VALUES {given}),"
        " chained (n, seq, prev, pseq, pprev, digest) AS ("
        f"SELECT 1, s.seq + 1, s.prev, s.pseq + 1, s.pprev, {digest('g', 's.prev', 's.pprev', 's.pseq + 1', 's.seq + 1')}"
        " FROM start s, given g WHERE g.n = 1"
        " UNION ALL"
        f" SELECT c.n + 1, c.seq + 1, c.digest, c.pseq + 1, CASE WHEN c.pseq IS NULL THEN NULL ELSE c.digest END,"
        f" {digest('g', 'c.digest', 'CASE WHEN c.pseq IS NULL THEN NULL ELSE c.digest END', 'c.pseq + 1', 'c.seq + 1')}"
        " FROM chained c JOIN given g ON g.n = c.n + 1),"
        f" entries AS (INSERT INTO {entry} ({columns})"
        " SELECT c.seq, c.prev, %s::bigint, c.pseq, c.pprev, g.at, g.actor_kind, g.actor, g.actor_id, g.policy_version, g.run_id, g.kind,"
        " g.decided, g.shown, c.digest FROM chained c JOIN given g ON g.n = c.n RETURNING seq, digest),"
        f" moved AS (UPDATE {head} h SET seq = h.seq + {count}, digest = (SELECT digest FROM chained WHERE n = {count})"
        f" FROM start WHERE h.chain IN (SELECT chain FROM locked)){kept_cte}"
        " SELECT seq, digest FROM entries"
    )
    return found


def _make_heads(connection: Any, chains: Sequence[str]) -> None:
    """The head rows of ``chains`` that do not exist yet, for a chain's first entry.

    A project's head is made only under the global head's lock: a writer holding that
    lock that found no project head makes it; another writer of the project, which
    has no lock yet, waits for the global head. Made without that order, a writer
    holding the global head could wait for another's uncommitted project head while
    that one waits for the global head."""
    quote = connection.ops.quote_name
    table = quote(Head._meta.db_table)
    insert = f"INSERT INTO {table} (chain, seq, digest) VALUES (%s, 0, %s) ON CONFLICT (chain) DO NOTHING"  # noqa: S608
    with checkpoint_cursor(connection) as cursor:
        cursor.execute(insert, [GLOBAL_CHAIN, GENESIS])
        rest = [chain for chain in chains if chain != GLOBAL_CHAIN]
        if rest and connection.vendor == "postgresql":
            cursor.execute(f"SELECT 1 FROM {table} WHERE chain = %s FOR UPDATE", [GLOBAL_CHAIN])  # noqa: S608
        for chain in rest:
            cursor.execute(insert, [chain, GENESIS])


# -- SQLite, and decisions of several projects: the entries computed here ---------------


def _write_in_steps(
    connection: Any, decisions: Sequence[Decision], projects: Sequence[int], kept: Mapping[str, str], now: datetime
) -> list[tuple[int, str]]:
    """Claim the heads (one statement: on PostgreSQL SELECT ... FOR UPDATE in the one
    order, on SQLite an UPDATE that makes this transaction the database's one writer),
    number and digest the entries here, insert them (and the content they keep), move
    the heads (one UPDATE)."""
    chains = [GLOBAL_CHAIN, *(project_chain(p) for p in projects)]
    heads = _claim(connection, chains)
    if len(heads) < len(chains):
        _make_heads(connection, [chain for chain in chains if chain not in heads])
        heads = _claim(connection, chains)
    rows = [_fields(decision, heads, now) for decision in decisions]
    quote = connection.ops.quote_name
    with checkpoint_cursor(connection) as cursor:
        if kept:
            values = ", ".join(["(%s, %s, %s)"] * len(kept))
            params: list[object] = [v for digest, body in kept.items() for v in (digest, body, _db_time(connection, now))]
            cursor.execute(
                f"INSERT INTO {quote(Content._meta.db_table)} (digest, body, kept_at) VALUES {values} ON CONFLICT (digest) DO NOTHING",  # noqa: S608
                params,
            )
        columns = (
            "seq",
            "prev",
            "project_id",
            "project_seq",
            "project_prev",
            "at",
            "actor_kind",
            "actor",
            "actor_id",
            "policy_version",
            "run_id",
            "kind",
            "decided",
            "shown",
            "digest",
        )
        values = ", ".join(["(" + ", ".join(["%s"] * len(columns)) + ")"] * len(rows))
        params = [value for fields in rows for value in _entry_values(connection, fields)]
        cursor.execute(f"INSERT INTO {quote(Entry._meta.db_table)} ({', '.join(columns)}) VALUES {values}", params)  # noqa: S608
        cases = " ".join(["WHEN %s THEN %s"] * len(heads))
        moved: list[object] = [v for chain, (_, digest) in heads.items() for v in (chain, digest)]
        moved += [v for chain, (seq, _) in heads.items() for v in (chain, seq)]
        cursor.execute(
            f"UPDATE {quote(Head._meta.db_table)} SET digest = CASE chain {cases} END, seq = CASE chain {cases} END WHERE chain IN ({', '.join(['%s'] * len(heads))})",  # noqa: S608
            [*moved, *heads],
        )
    return [(int(fields["seq"]), str(fields["digest"])) for fields in rows]


def _db_time(connection: Any, at: datetime) -> object:
    return connection.ops.adapt_datetimefield_value(at)


def _entry_values(connection: Any, fields: Mapping[str, Any]) -> list[object]:
    actor = fields["actor"]
    at = datetime.strptime(fields["at"], TIME_FORMAT).replace(tzinfo=UTC)
    return [
        fields["seq"],
        fields["prev"],
        fields["project"],
        fields["project_seq"],
        fields["project_prev"],
        _db_time(connection, at),
        actor["kind"],
        actor["name"],
        actor["id"],
        fields["policy_version"],
        fields["run"],
        fields["kind"],
        canonical(fields["decided"]).decode("utf-8"),
        fields["shown"],
        fields["digest"],
    ]


def _count(decisions: Sequence[Decision]) -> None:
    """The Prometheus counters (docs/design.md, Metrics), once the entries are committed;
    a failure to count never fails a decision."""
    try:
        for decision in decisions:
            LEDGER_ENTRIES.labels(decision.kind).inc()
    except Exception:
        log.exception("counting the ledger's entries failed")


def _claim(connection: Any, chains: Sequence[str]) -> dict[str, list[Any]]:
    """The heads of ``chains`` that exist, each ``[last seq, its digest]`` as the writer
    before left it, locked until this transaction ends: on PostgreSQL by SELECT ... FOR
    UPDATE in the one order (which, under READ COMMITTED, waits for the head's last
    writer to commit and returns the head as it left it); on SQLite an UPDATE that
    changes nothing but makes this transaction the database's one writer."""
    quote = connection.ops.quote_name
    table = quote(Head._meta.db_table)
    marks = ", ".join(["%s"] * len(chains))
    if connection.vendor == "postgresql":
        sql = f"SELECT chain, seq, digest FROM {table} WHERE chain IN ({marks}) ORDER BY chain FOR UPDATE"  # noqa: S608
    else:
        sql = f"UPDATE {table} SET seq = seq WHERE chain IN ({marks}) RETURNING chain, seq, digest"  # noqa: S608
    with checkpoint_cursor(connection) as cursor:
        cursor.execute(sql, list(chains))
        found = cursor.fetchall()
    return {str(chain): [int(seq), str(digest)] for chain, seq, digest in sorted(found, key=lambda row: chains.index(row[0]))}


def _fields_unchained(decision: Decision, now: datetime) -> dict[str, Any]:
    """The entry's fields in the export's names (ledger.verify.HASHED) but its places
    in the chains."""
    return {
        "v": VERSION,
        "seq": None,
        "prev": None,
        "project": decision.project_id,
        "project_seq": None,
        "project_prev": None,
        "at": timestamp(decision.at or now),
        "actor": decision.actor.as_json(),
        "policy_version": decision.policy_version,
        "run": decision.run_id,
        "kind": decision.kind,
        # The decided values as the canonical text stores and reads them back.
        "decided": decided_value(canonical(dict(decision.decided)).decode("utf-8")),
        "shown": decision.shown.digest,
    }


def _fields(decision: Decision, heads: dict[str, list[Any]], now: datetime) -> dict[str, Any]:
    """The entry's fields in the export's names (ledger.verify.HASHED), its digest, and
    the heads moved on past it."""
    fields = _fields_unchained(decision, now)
    chained = [("seq", "prev", heads[GLOBAL_CHAIN])]
    if decision.project_id is not None:
        chained.append(("project_seq", "project_prev", heads[project_chain(decision.project_id)]))
    for seq_name, prev_name, head in chained:
        fields[seq_name] = head[0] + 1
        fields[prev_name] = head[1]
    fields["digest"] = entry_digest(fields)
    for _seq_name, _prev_name, head in chained:
        head[0] += 1
        head[1] = fields["digest"]
    return fields


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
