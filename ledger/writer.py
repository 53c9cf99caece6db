"""The one writer of the decision ledger: ``record`` (docs/design.md, Decision ledger).

Called by the code that makes a decision, inside the transaction that makes it, so the
entry commits or rolls back with the decision: a decision not in the ledger did not
happen. Each entry joins two chains, the global one and its project's; a chain's
writers are ordered by the chain's ``Head`` row (see ``_claim``).

Locks. Every writer claims the heads it needs in one order (the global chain's, then
each project's by ascending id) and only at the end of its decision: a transaction that
records decisions about several runs (a policy save lapsing their requests, a project's
"stop all") takes each run's row lock first and the heads last, inside ``batch``. A
checkpoint takes its run's row lock, then the heads: on PostgreSQL in its one statement
(``joining``), inside a batch that takes no row lock after that statement
(``joinable``). So nobody holding a head waits for a run's row, nor for any other, and
the heads cannot close a cycle of waits."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import lru_cache
from typing import Any

from django.db import DEFAULT_DB_ALIAS, IntegrityError, connections, transaction
from django.utils import timezone

from common.cursors import checkpoint_cursor
from common.metrics import LEDGER_ENTRIES
from ledger.models import GLOBAL_CHAIN, Content, Entry, Head, project_chain
from ledger.verify import GENESIS, VERSION, canonical, sha256

__all__ = [
    "JOINED_ENTRIES",
    "Actor",
    "Decision",
    "Joined",
    "Shown",
    "batch",
    "forget_heads",
    "joining",
    "keep",
    "person",
    "record",
    "rule",
    "system",
    "through_token",
    "token_of",
]


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


@lru_cache(maxsize=1024)
def rule(name: str) -> Actor:
    # One actor per rule, as a policy has a few: each gate's decision names one.
    return Actor("rule", name)


def system(what: str) -> Actor:
    return Actor("system", what)


@dataclass(slots=True)
class Shown:
    """What a decider was shown, as the canonical bytes the entry's ``shown`` digest is
    over, and that digest (made once here: every decision's entry needs it). ``keep``:
    the bytes are kept (ledger.models.Content) for exports until retention forgets
    them. Content kept by whoever showed it (``keep``) is named here by its digest
    alone (``kept_elsewhere``)."""

    canonical: bytes
    keep: bool
    digest: str

    @classmethod
    def of(cls, value: Any, *, keep: bool = True) -> Shown:
        data = canonical(value)
        return cls(data, keep, sha256(data))

    @classmethod
    def kept_elsewhere(cls, digest: str) -> Shown:
        return cls(b"", False, digest)


def keep(shown: Shown) -> None:
    """Keep what a decider is being shown, in the caller's transaction, before the
    decision naming it (``Shown.kept_elsewhere``) is recorded. One statement through the
    checkpoint's cursor, as the writer keeps content (the ORM's bulk_create cost a
    reviewer's decision more than the rest of its entry)."""
    _keep_apart(connections[DEFAULT_DB_ALIAS], {shown.digest: shown.canonical.decode("utf-8")}, timezone.now())


@dataclass(slots=True)
class Decision:
    """One decision to record: its kind (``gate.allowed``, ``approval.granted``,
    ``admin.policy_saved``...), who made it, what was decided and what they were shown.
    Not frozen: a frozen dataclass sets each field through ``object.__setattr__``, and
    made this way one costs a step's entry a quarter of what the frozen one did; the
    writer reads a decision once and keeps none."""

    kind: str
    actor: Actor
    decided: Mapping[str, Any]
    shown: Shown
    project_id: int | None = None
    run_id: str = ""
    policy_version: int | None = None
    at: datetime | None = field(default=None, compare=False)
    # ``decided``'s canonical text where its maker wrote it out (a gate's admission:
    # runs.persistence.decisions), which the entry stores as it is; None: encoded here.
    decided_text: str | None = None


log = logging.getLogger(__name__)

_pending: ContextVar[list[Decision] | None] = ContextVar("ledger_pending", default=None)
# Whether the outer batch is ``joinable``.
_joinable: ContextVar[bool] = ContextVar("ledger_joinable", default=False)


def record(*decisions: Decision, connection: Any = None) -> None:
    """Record ``decisions``, in the caller's transaction: now, or inside ``batch`` at
    its end. ``connection``: the default database's, where the caller holds it (a
    checkpoint): looked up again (``connections[...]``, a context-local read), it cost
    a step's entry some 10,000 instructions."""
    pending = _pending.get()
    if pending is not None:
        pending.extend(decisions)
        return
    _write(decisions, connection)


@contextmanager
def batch(*, savepoint: bool = True, joinable: bool = False, connection: Any = None) -> Iterator[None]:
    """A transaction (``transaction.atomic``) whose decisions are all recorded at its
    end, after every other lock it takes (see the module's note). A batch inside a batch
    is part of the outer one's, and forgets what it recorded if it fails (as its
    savepoint does); a plain ``atomic`` block that rolls back inside a batch must record
    no decision. ``joinable`` (an outer batch's): the batch takes no row lock after the
    statement that numbers a run's events, so that statement may write its decisions'
    entries and take the heads itself (``joining``): a checkpoint of a run that goes on
    (runs.persistence.store). ``connection``: the default database's, where the caller
    holds it, for the batch's end to write through (as ``record``'s)."""
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
    join = _joinable.set(joinable)
    reset = False
    try:
        with transaction.atomic(savepoint=savepoint):
            yield
            # Written by this batch, not queued again by itself.
            _pending.reset(token)
            reset = True
            _write(pending, connection)
    finally:
        _joinable.reset(join)
        if not reset:
            _pending.reset(token)


def _write(decisions: Sequence[Decision], connection: Any = None) -> list[tuple[int, str]]:
    """Write ``decisions``' entries (and the content they keep); ``(seq, digest)`` of each."""
    if not decisions:
        return []
    if connection is None:
        connection = connections[DEFAULT_DB_ALIAS]
    if len(decisions) == 1:
        # A single decision's (a step's admission) without comprehensions: one cost it
        # some 3,500 instructions.
        shown, project = decisions[0].shown, decisions[0].project_id
        projects = [project] if project is not None else []
        kept = {shown.digest: shown.canonical.decode("utf-8")} if shown.keep else {}
    else:
        projects = sorted({d.project_id for d in decisions if d.project_id is not None})
        kept = {d.shown.digest: d.shown.canonical.decode("utf-8") for d in decisions if d.shown.keep}
    now = _stamp_now()
    if not connection.in_atomic_block:
        with transaction.atomic(savepoint=False):
            return _write_chained(connection, decisions, projects, kept, now)
    # Inside the caller's transaction (a checkpoint's batch), as a nested atomic block
    # without a savepoint would be, less its bookkeeping: what fails here fails it.
    try:
        return _write_chained(connection, decisions, projects, kept, now)
    except BaseException:
        connection.needs_rollback = True
        raise


def _write_chained(
    connection: Any, decisions: Sequence[Decision], projects: Sequence[int], kept: Mapping[str, str], now: str
) -> list[tuple[int, str]]:
    if connection.vendor == "sqlite" and len(projects) <= 1:
        project = projects[0] if projects else None
        written = _write_on_known_heads(connection, decisions, project, kept, now) or _write_at_once(
            connection, decisions, project, kept, now
        )
    elif connection.vendor == "postgresql" and len(projects) <= 1:
        written = _write_at_once(connection, decisions, projects[0] if projects else None, kept, now)
    else:
        written = _write_in_steps(connection, decisions, projects, kept, now)
    connection.on_commit(lambda: _count(decisions))
    return written


# -- SQLite, on the heads this process last left: one plain INSERT ---------------------
#
# A writer on SQLite is the database's one writer for its whole transaction (it began
# IMMEDIATE), and most often the last writer too: the heads are where its own last entry
# left them. So a single decision (a step's admission, a reviewer's) is numbered and
# digested here, from the heads this process remembers (``_known``), and sent as a
# plain INSERT of the entry. The entries' trigger (ledger/migrations/0003) checks, as it
# moves the heads on to the entry, that the entry links on to them as they were (its
# seq and prev the global head's next, its project_seq and project_prev its project
# head's), and aborts the statement otherwise: then nothing was inserted (another
# process wrote since, a transaction of this one rolled back, a chain's first entry),
# and the writer chains the entry in SQL (``_write_at_once``), as it does several
# decisions at once. The statement neither recurses nor calls back into Python.

# (database, chain) -> (seq, digest) of the chain's head as this process last left it.
_known: dict[tuple[str, str], tuple[int, str]] = {}


def _remember(name: str, chain: str | None, head: tuple[int, str], project_head: tuple[int, str] | None) -> None:
    """The heads this process left on database ``name``: the global chain's, and
    ``chain``'s (a project's) where the entries had a project."""
    if len(_known) > 4096:
        _known.clear()
    _known[(name, GLOBAL_CHAIN)] = head
    if chain is not None and project_head is not None:
        _known[(name, chain)] = project_head


def forget_heads() -> None:
    """Forget the heads this process remembers (the ledger's tables emptied under it, as
    tests do): its next entry is chained in SQL, as a fresh process's first is."""
    _known.clear()


def _write_on_known_heads(
    connection: Any, decisions: Sequence[Decision], project: int | None, kept: Mapping[str, str], now: str
) -> list[tuple[int, str]]:
    """The entry of a single decision, inserted in one statement if it links on to the
    heads this process remembers; none (the caller chains it in SQL) otherwise."""
    if len(decisions) != 1:
        return []
    name = str(connection.settings_dict["NAME"])
    known = _known.get((name, GLOBAL_CHAIN))
    chain = project_chain(project) if project is not None else None
    known_project = _known.get((name, chain)) if chain is not None else None
    if known is None or (chain is not None and known_project is None):
        return []
    seq = known[0] + 1
    project_seq, project_prev = (known_project[0] + 1, known_project[1]) if known_project is not None else (None, None)
    digest, row = _entry_row(connection, decisions[0], seq, known[1], project_seq, project_prev, now)
    try:
        # The kept cursor: the driver's own where nothing watches the statements
        # (common.cursors), so the entry costs no Django cursor wrapper.
        with checkpoint_cursor(connection) as cursor:
            cursor.execute(_statement_on_known_heads(connection), row)
    except IntegrityError:
        # The entry does not link on (the trigger's check, or a seq taken): the
        # statement inserted nothing and the transaction goes on.
        _known.pop((name, GLOBAL_CHAIN), None)
        return []
    if kept:
        _keep_apart(connection, kept, _time_of(now))
    _remember(name, chain, (seq, digest), (project_seq, digest) if project_seq is not None else None)
    return [(seq, digest)]


_on_known: list[str] = []


def _statement_on_known_heads(connection: Any) -> str:
    if not _on_known:
        values = ", ".join(["%s"] * len(_COLUMNS))
        # Only the model's quoted table name is spliced in; every value is a parameter.
        _on_known.append(f"INSERT INTO {connection.ops.quote_name(Entry._meta.db_table)} ({', '.join(_COLUMNS)}) VALUES ({values})")  # noqa: S608
    return _on_known[0]


# -- PostgreSQL, the decisions of one project (or of none): one statement -------------
#
# A checkpoint's decisions are of one run, so of one project. The statement locks both
# heads in the one order (ORDER BY chain: "global" before "project:..."; holding the
# global head excludes every other writer, so no two writers ever wait on each other's
# heads) with SELECT ... FOR UPDATE, which under READ COMMITTED returns each head as the
# writer before left it once that writer commits; chains the entries on from there
# (a recursive common table expression computing each entry's digest on the server from
# its canonical JSON, which Python gives with the four chained fields left as gaps,
# ``_template``: the bytes ledger.verify.entry_digest hashes); inserts them and the
# content they keep; and moves both heads to the last entry. A chain's first writer
# finds no head row: the statement then writes nothing, and is sent again once the
# rows exist.


def _entry_parts(decision: Decision, decided: str, stamp: str, prev: str, project_prev: str, project_seq: str, seq: str) -> tuple[str, ...]:
    """The entry's canonical JSON, what ledger.verify.entry_digest hashes, as the texts
    it joins, its four chained fields given as their JSON texts. Written
    out key by key rather than encoded from a dict: every value is encoded as
    ``canonical`` encodes it, ``decided`` already is, and the keys are in
    ``canonical``'s order (tests/test_ledger_tamper.py verifies the chains); ``stamp``
    is the entry's time, ``timestamp``'s text. Joined once (``str.join``), an entry's
    text was some 13,700 instructions; made as one f-string 16,600, as five texts
    with the chained fields filled in after 21,200 (callgrind, each 50 times)."""
    actor = decision.actor
    return (
        '{"actor":{"id":',
        _text(actor.id),
        ',"kind":',
        _text(actor.kind),
        ',"name":',
        _text(actor.name),
        '},"at":"',
        stamp,
        '","decided":',
        decided,
        ',"kind":',
        _text(decision.kind),
        ',"policy_version":',
        "null" if decision.policy_version is None else str(int(decision.policy_version)),
        ',"prev":',
        prev,
        ',"project":',
        "null" if decision.project_id is None else str(int(decision.project_id)),
        ',"project_prev":',
        project_prev,
        ',"project_seq":',
        project_seq,
        ',"run":',
        _text(decision.run_id),
        ',"seq":',
        seq,
        ',"shown":',
        _text(decision.shown.digest),
        _VERSIONED,
    )


_VERSIONED = f',"v":{VERSION}}}'


def _template(decision: Decision, decided: str, stamp: str) -> list[str]:
    """The entry's canonical JSON split at its four chained fields, in the order its
    sorted keys put them (prev, project_prev, project_seq, seq), each gap less the
    quotes a digest's text takes: five texts, the gaps filled by the same expression
    in SQL (``_digest_sql``)."""
    p = _entry_parts(decision, decided, stamp, "", "", "", "")
    # The texts between ``_entry_parts``' gaps (15, 19, 21, 25), by ``+`` where they are
    # few: a slice and a join each cost more.
    return ["".join(p[:15]), p[16] + p[17] + p[18], p[20], p[22] + p[23] + p[24], p[26] + p[27] + p[28]]


# A JSON string as ``canonical`` encodes it (ensure_ascii=False).
_text = json.encoder.encode_basestring


# The values whose JSON text reads back as an equal value of the same type.
_SCALARS = frozenset((str, int, float, bool, type(None)))
_KEYS = frozenset((str,))


def _decided(decision: Decision) -> str:
    """What was decided, as the canonical text the entry stores and its digest covers:
    the canonical encoding of the value an export reads back from that text (the same
    text but where a key was not a string). A flat mapping of strings to scalars (a
    gate's decision) reads back as itself, so its one encoding is that text; anything
    else is encoded, read back and encoded again. Given written out
    (``Decision.decided_text``), that text."""
    if decision.decided_text is not None:
        return decision.decided_text
    decided = decision.decided
    text = canonical(decided if type(decided) is dict else dict(decided))
    # The types looked at in C, not by a generator in Python.
    if not (_KEYS.issuperset(map(type, decided)) and _SCALARS.issuperset(map(type, decided.values()))):
        text = canonical(json.loads(text))
    return text.decode("utf-8")


def _write_at_once(
    connection: Any, decisions: Sequence[Decision], project: int | None, kept: Mapping[str, str], now: str
) -> list[tuple[int, str]]:
    sql = _statement_at_once(connection, len(decisions), len(kept))
    chain = project_chain(project) if project is not None else None
    params: list[object] = [GLOBAL_CHAIN, chain, chain, GLOBAL_CHAIN, 2 if chain else 1]
    for n, decision in enumerate(decisions, start=1):
        actor, at, decided = decision.actor, decision.at or _time_of(now), _decided(decision)
        params += [n, *_template(decision, decided, now if decision.at is None else timestamp(at))]
        params += [at, actor.kind, actor.name, actor.id, decision.policy_version, decision.run_id, decision.kind]
        params += [decided, decision.shown.digest]
    params.append(project)
    if connection.vendor == "postgresql":
        params += [v for digest, body in kept.items() for v in (digest, body, _time_of(now))]
    elif kept:
        _keep_apart(connection, kept, _time_of(now))
    for attempt in (1, 2):
        with checkpoint_cursor(connection) as cursor:
            cursor.execute(sql, params)
            found = sorted((int(seq), str(digest), pseq) for seq, digest, *pseq in cursor.fetchall())
        written = [(seq, digest) for seq, digest, _ in found]
        if written or attempt == 2:
            break
        # A chain's first entry: its head row, made here (a concurrent first writer's
        # waits for this transaction, which holds the global head, and does nothing).
        _make_heads(connection, [GLOBAL_CHAIN, *([chain] if chain else [])])
    if len(written) != len(decisions):
        raise RuntimeError(f"the ledger wrote {len(written)} of {len(decisions)} entries")
    if connection.vendor == "sqlite":
        seq, digest, pseq = found[-1]
        _remember(str(connection.settings_dict["NAME"]), chain, (seq, digest), (int(pseq[0]), digest) if chain is not None else None)
    return written


_at_once: dict[tuple[str, int, int], str] = {}


def _statement_at_once(connection: Any, count: int, kept: int) -> str:
    key = (connection.vendor, count, kept)
    found = _at_once.get(key)
    if found is not None:
        return found
    postgres = connection.vendor == "postgresql"
    quote = connection.ops.quote_name
    head, entry, content = (quote(m._meta.db_table) for m in (Head, Entry, Content))

    def value(kind: str) -> str:
        # PostgreSQL types a VALUES list's parameters by these casts; SQLite takes them as given.
        return f"%s::{kind}" if postgres else "%s"

    kinds = ("integer", *["text"] * 5, "timestamptz", "text", "text", "text", "integer", "text", "text", "text", "text")
    given = ", ".join(["(" + ", ".join(value(kind) for kind in kinds) + ")"] * count)

    def digest(row: str, prev: str, pprev: str, pseq: str, seq: str) -> str:
        return _digest_sql(postgres, row, prev, pprev, pseq, seq)

    columns = ", ".join(_COLUMNS)
    # Only the models' quoted table names are spliced in; every value is a parameter.
    # The heads: on PostgreSQL locked (see above); on SQLite this transaction is
    # already the database's one writer (it began IMMEDIATE: settings.DATABASES).
    lock = " ORDER BY chain FOR UPDATE" if postgres else ""
    locked = f"{'MATERIALIZED ' if postgres else ''}(SELECT chain, seq, digest FROM {head} WHERE chain IN (%s, %s){lock})"  # noqa: S608
    chained = (
        f"WITH RECURSIVE locked AS {locked},"  # noqa: S608
        " start AS (SELECT g.seq AS seq, CAST(g.digest AS text) AS prev, p.seq AS pseq, CAST(p.digest AS text) AS pprev"
        " FROM locked g LEFT JOIN locked p ON p.chain = %s WHERE g.chain = %s AND (SELECT count(*) FROM locked) = %s),"
        " given (n, t0, t1, t2, t3, t4, at, actor_kind, actor, actor_id, policy_version, run_id, kind, decided, shown)"
        f" AS (VALUES {given}),"
        " chained (n, seq, prev, pseq, pprev, digest) AS ("
        f"SELECT 1, s.seq + 1, s.prev, s.pseq + 1, s.pprev, {digest('g', 's.prev', 's.pprev', 's.pseq + 1', 's.seq + 1')}"
        " FROM start s, given g WHERE g.n = 1"
        " UNION ALL"
        f" SELECT c.n + 1, c.seq + 1, c.digest, c.pseq + 1, CASE WHEN c.pseq IS NULL THEN NULL ELSE c.digest END,"
        f" {digest('g', 'c.digest', 'CASE WHEN c.pseq IS NULL THEN NULL ELSE c.digest END', 'c.pseq + 1', 'c.seq + 1')}"
        " FROM chained c JOIN given g ON g.n = c.n + 1)"
    )
    insert = (
        f"INSERT INTO {entry} ({columns})"  # noqa: S608
        f" SELECT c.seq, c.prev, CAST(%s AS bigint), c.pseq, c.pprev, g.at, g.actor_kind, g.actor, g.actor_id, g.policy_version, g.run_id,"
        " g.kind, g.decided, g.shown, c.digest FROM chained c JOIN given g ON g.n = c.n ORDER BY c.n RETURNING seq, digest, project_seq"
    )
    if not postgres:
        # SQLite has no INSERT or UPDATE inside WITH: the entries' trigger moves the
        # heads (ledger/migrations/0002), and the content kept goes in apart (_keep_apart).
        found = _at_once[key] = f"{chained} {insert}"
        return found
    kept_cte = ""
    if kept:
        rows = ", ".join(["(%s::text, %s::text, %s::timestamptz)"] * kept)
        kept_cte = f", kept AS (INSERT INTO {content} (digest, body, kept_at) VALUES {rows} ON CONFLICT (digest) DO NOTHING)"  # noqa: S608 - quoted table names; values are parameters
    found = _at_once[key] = (
        f"{chained}, entries AS ({insert}),"  # noqa: S608
        f" moved AS (UPDATE {head} h SET seq = h.seq + {count}, digest = (SELECT digest FROM chained WHERE n = {count})"
        f" FROM start WHERE h.chain IN (SELECT chain FROM locked)){kept_cte}"
        " SELECT seq, digest FROM entries"
    )
    return found


def _digest_sql(postgres: bool, row: str, prev: str, pprev: str, pseq: str, seq: str) -> str:
    """An entry's digest in SQL: ``row``'s five texts (``_template``), the chained fields between."""
    text = (
        f"{row}.t0 || '\"' || {prev} || '\"' || {row}.t1 || coalesce('\"' || {pprev} || '\"', 'null') || {row}.t2"
        f" || coalesce(CAST({pseq} AS text), 'null') || {row}.t3 || CAST({seq} AS text) || {row}.t4"
    )
    # On SQLite the function ``ledger_sha256`` (ledger.apps) is Python's hashlib.
    return f"encode(sha256(convert_to({text}, 'UTF8')), 'hex')" if postgres else f"ledger_sha256({text})"


# -- PostgreSQL, a checkpoint's decision in the checkpoint's own statement ------------
#
# A checkpoint on PostgreSQL is one statement (runs.persistence.eventlog): the numbering
# UPDATE of the run row, the events' INSERT and the projections'. Its one decision (a
# step's admission: the common case) is written by that statement too, as common table
# expressions ``joining`` gives the caller: one round trip less than a statement of its
# own. They lock the heads (as ``_statement_at_once`` does) only once the caller's
# ``guard`` holds, which reads the caller's row: so the run row is locked first and the
# heads after it, as the module's note orders them; and only inside a ``joinable``
# batch, where nothing takes a row lock after that statement. The decision's values go
# as one text: the statement's parameters stay under psycopg's 50, past which it
# parses the statement again at every execution (psycopg/_queries.py,
# MAX_CACHED_STATEMENT_PARAMS). Several decisions, content to keep, a chain's first
# entry (no head row yet) or a guard that does not hold: nothing is written here and the
# caller records the decisions as ever.

JOINED_ENTRIES = "ledger_entries"


class Joined:
    """The decisions recorded while it is entered (``with``), kept for the caller's
    statement (``statement``) rather than for the batch's end."""

    __slots__ = ("_outer", "_token", "connection", "decisions")

    def __init__(self, connection: Any) -> None:
        self.connection = connection
        self.decisions: list[Decision] = []

    def __enter__(self) -> Joined:
        self._token = _pending.set(self.decisions)
        return self

    def __exit__(self, *exc: object) -> None:
        _pending.reset(self._token)

    def statement(self, guard: str, params: Sequence[object]) -> tuple[str, list[object]] | None:
        """The common table expressions writing the entry of the one decision recorded
        (their last, ``JOINED_ENTRIES``, returns its seq) once ``guard`` (SQL of the
        caller's statement, with ``params``) holds, and their parameters; None where
        that decision is not written so."""
        if len(self.decisions) != 1 or self.decisions[0].shown.keep:
            return None
        decision = self.decisions[0]
        project = decision.project_id
        chain = project_chain(project) if project is not None else None
        actor, decided = decision.actor, _decided(decision)
        stamp = _stamp_now() if decision.at is None else timestamp(decision.at)
        version = "" if decision.policy_version is None else str(int(decision.policy_version))
        values = [
            *_template(decision, decided, stamp),
            stamp,
            actor.kind,
            actor.name,
            actor.id,
            version,
            decision.run_id,
            decision.kind,
            decided,
            decision.shown.digest,
            "" if project is None else str(int(project)),
        ]
        texts = _SEPARATOR.join(values)
        if texts.count(_SEPARATOR) != len(values) - 1:
            # A value holds the separator (JSON never does: it escapes control characters).
            return None
        return _statement_joined(self.connection, guard), [GLOBAL_CHAIN, chain, *params, texts, GLOBAL_CHAIN, 2 if chain else 1]

    def ready(self) -> tuple[str, list[object]]:
        """SQL that holds, with its parameters, where the heads ``statement``'s entry
        chains on exist: a caller whose statement is its own transaction makes it a
        condition of the whole statement, which then writes the entry or nothing."""
        project = self.decisions[0].project_id if len(self.decisions) == 1 else None
        chain = project_chain(project) if project is not None else None
        if not _ready:
            head = self.connection.ops.quote_name(Head._meta.db_table)
            _ready.append(f"(SELECT count(*) FROM {head} WHERE chain IN (%s, %s)) = %s")  # noqa: S608 - a quoted table name
        return _ready[0], [GLOBAL_CHAIN, chain, 2 if chain else 1]

    def written(self, entries: int) -> bool:
        """Whether the caller's statement wrote the ``entries`` of all these decisions
        (counted once committed); otherwise the caller records them."""
        if not self.decisions or entries != len(self.decisions):
            return False
        decisions = self.decisions
        self.connection.on_commit(lambda: _count(decisions))
        return True


# ``Joined.ready``'s SQL, made once: only the quoted table name is in it.
_ready: list[str] = []


def joining(connection: Any, *, alone: bool = False) -> Joined | None:
    """Inside a ``joinable`` batch on PostgreSQL with no decision pending, or ``alone``
    (the caller's statement is all its transaction holds: it takes no lock after it): a
    ``Joined`` keeping the decisions recorded inside it for the caller's statement; None
    elsewhere (decisions are recorded as ever)."""
    if connection.vendor != "postgresql" or not (alone or _joinable.get()) or _pending.get():
        return None
    return Joined(connection)


# ``Joined.statement``'s values go as one text, split on the server at this control
# character: one parameter that psycopg passes as it is (a list, an array parameter, it
# encodes in Python, item by item, at more instructions than the statement saved).
_SEPARATOR = "\x1f"
# The texts of ``Joined.statement``'s values, in order ("" for no project or policy version).
_JOINED_TEXTS = (
    "t0",
    "t1",
    "t2",
    "t3",
    "t4",
    "at",
    "actor_kind",
    "actor",
    "actor_id",
    "policy_version",
    "run_id",
    "kind",
    "decided",
    "shown",
    "project",
)
_joined: dict[str, str] = {}


def _statement_joined(connection: Any, guard: str) -> str:
    found = _joined.get(guard)
    if found is not None:
        return found
    quote = connection.ops.quote_name
    head, entry = (quote(m._meta.db_table) for m in (Head, Entry))
    given = ", ".join(f"v[{n}] AS {name}" for n, name in enumerate(_JOINED_TEXTS, start=1))
    # Only the models' quoted table names and the caller's guard are spliced in; every value is a parameter.
    found = _joined[guard] = (
        f"ledger_locked AS MATERIALIZED (SELECT chain, seq, digest FROM {head} WHERE chain IN (%s, %s) AND {guard} ORDER BY chain FOR UPDATE),"  # noqa: S608
        f" ledger_given AS (SELECT {given} FROM (SELECT string_to_array(CAST(%s AS text), chr(31)) AS v) a),"
        " ledger_start AS (SELECT g.seq + 1 AS seq, CAST(g.digest AS text) AS prev, p.seq + 1 AS pseq, CAST(p.digest AS text) AS pprev"
        " FROM ledger_locked g LEFT JOIN ledger_locked p ON p.chain <> g.chain WHERE g.chain = %s AND (SELECT count(*) FROM ledger_locked) = %s),"
        f" ledger_chained AS (SELECT s.*, {_digest_sql(True, 'e', 's.prev', 's.pprev', 's.pseq', 's.seq')} AS digest FROM ledger_start s, ledger_given e),"
        f" {JOINED_ENTRIES} AS (INSERT INTO {entry} ({', '.join(_COLUMNS)}) SELECT c.seq, c.prev, CAST(NULLIF(e.project, '') AS bigint), c.pseq, c.pprev,"
        " CAST(e.at AS timestamptz), e.actor_kind, e.actor, e.actor_id, CAST(NULLIF(e.policy_version, '') AS integer), e.run_id, e.kind, e.decided, e.shown,"
        " c.digest FROM ledger_chained c, ledger_given e RETURNING seq),"
        f" ledger_moved AS (UPDATE {head} h SET seq = h.seq + 1, digest = c.digest FROM ledger_chained c WHERE h.chain IN (SELECT chain FROM ledger_locked))"
    )
    return found


def _keep_apart(connection: Any, kept: Mapping[str, str], now: datetime) -> None:
    """The content that decisions keep, in a statement of its own (SQLite's writers, and
    ``keep``)."""
    if not kept:
        return
    values = ", ".join(["(%s, %s, %s)"] * len(kept))
    params: list[object] = [v for digest, body in kept.items() for v in (digest, body, _db_time(connection, now))]
    with checkpoint_cursor(connection) as cursor:
        cursor.execute(
            f"INSERT INTO {connection.ops.quote_name(Content._meta.db_table)} (digest, body, kept_at) VALUES {values} ON CONFLICT (digest) DO NOTHING",  # noqa: S608
            params,
        )


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
    connection: Any, decisions: Sequence[Decision], projects: Sequence[int], kept: Mapping[str, str], now: str
) -> list[tuple[int, str]]:
    """Claim the heads (one statement: on PostgreSQL SELECT ... FOR UPDATE in the one
    order, on SQLite an UPDATE that makes this transaction the database's one writer),
    number and digest the entries here, insert them (and the content they keep), move
    the heads (one UPDATE on PostgreSQL, the entries' trigger on SQLite)."""
    chains = [GLOBAL_CHAIN, *(project_chain(p) for p in projects)]
    heads = _claim(connection, chains)
    if len(heads) < len(chains):
        _make_heads(connection, [chain for chain in chains if chain not in heads])
        heads = _claim(connection, chains)
    rows = []  # (seq, digest, row)
    for decision in decisions:
        ahead = heads[GLOBAL_CHAIN]
        phead = heads[project_chain(decision.project_id)] if decision.project_id is not None else None
        seq = ahead[0] + 1
        project_seq, project_prev = (phead[0] + 1, phead[1]) if phead is not None else (None, None)
        digest, row = _entry_row(connection, decision, seq, ahead[1], project_seq, project_prev, now)
        rows.append((seq, digest, row))
        ahead[:] = [seq, digest]
        if phead is not None:
            phead[:] = [project_seq, digest]
    if kept:
        _keep_apart(connection, kept, _time_of(now))
    quote = connection.ops.quote_name
    with checkpoint_cursor(connection) as cursor:
        values = ", ".join(["(" + ", ".join(["%s"] * len(_COLUMNS)) + ")"] * len(rows))
        params = [value for _, _, row in rows for value in row]
        cursor.execute(f"INSERT INTO {quote(Entry._meta.db_table)} ({', '.join(_COLUMNS)}) VALUES {values}", params)  # noqa: S608
        if connection.vendor == "sqlite":
            # The entries' trigger moved the heads (ledger/migrations/0002).
            return [(seq, digest) for seq, digest, _row in rows]
        cases = " ".join(["WHEN %s THEN %s"] * len(heads))
        moved: list[object] = [v for chain, (_, digest) in heads.items() for v in (chain, digest)]
        moved += [v for chain, (seq, _) in heads.items() for v in (chain, seq)]
        cursor.execute(
            f"UPDATE {quote(Head._meta.db_table)} SET digest = CASE chain {cases} END, seq = CASE chain {cases} END WHERE chain IN ({', '.join(['%s'] * len(heads))})",  # noqa: S608
            [*moved, *heads],
        )
    return [(seq, digest) for seq, digest, _row in rows]


_COLUMNS = (
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


def _db_time(connection: Any, at: datetime) -> object:
    return connection.ops.adapt_datetimefield_value(at)


def _entry_time(connection: Any, stamp: str) -> object:
    """An entry's time, ``stamp`` (its digest's text), as ``connection`` takes it. On
    SQLite in UTC, the text Django stores (``_db_time``: the naive UTC time's ``str``,
    whole seconds without a fraction) cut from ``stamp``: Django's way made the time
    twice more, at some 20,000 instructions an entry (tests/test_ledger_canonical.py
    holds the two texts equal)."""
    if connection.vendor == "sqlite" and connection.timezone is UTC:
        return f"{stamp[:10]} {stamp[11:19] if stamp.endswith('.000000Z') else stamp[11:26]}"
    return _db_time(connection, _time_of(stamp))


def _entry_row(
    connection: Any, decision: Decision, seq: int, prev: str, project_seq: int | None, project_prev: str | None, now: str
) -> tuple[str, tuple[object, ...]]:
    """The digest and row (``_COLUMNS``, its time as ``connection`` takes it) of the
    entry numbered ``seq`` after ``prev`` (and ``project_seq`` after ``project_prev``
    in its project's chain); ``now`` its time where the decision has none, as
    ``_stamp_now`` gives it."""
    decided = _decided(decision)
    stamp = now if decision.at is None else timestamp(decision.at)
    pprev = "null" if project_prev is None else f'"{project_prev}"'
    pseq = "null" if project_seq is None else str(project_seq)
    digest = sha256("".join(_entry_parts(decision, decided, stamp, f'"{prev}"', pprev, pseq, str(seq))).encode())
    actor = decision.actor
    return (
        digest,
        (
            seq,
            prev,
            decision.project_id,
            project_seq,
            project_prev,
            _entry_time(connection, stamp),
            actor.kind,
            actor.name,
            actor.id,
            decision.policy_version,
            decision.run_id,
            decision.kind,
            decided,
            decision.shown.digest,
            digest,
        ),
    )


# The counter of each kind, as LEDGER_ENTRIES.labels gives it (the same one each time).
_counters: dict[str, Any] = {}


def _count(decisions: Sequence[Decision]) -> None:
    """The Prometheus counters (docs/design.md, Metrics), once the entries are committed;
    a failure to count never fails a decision."""
    try:
        for decision in decisions:
            counter = _counters.get(decision.kind)
            if counter is None:
                counter = _counters[decision.kind] = LEDGER_ENTRIES.labels(decision.kind)
            counter.inc()
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


def timestamp(at: datetime) -> str:
    """An entry's time as its digest covers it: UTC, to the microsecond the databases
    keep (``2026-12-06T23:53:40.123456Z``): ``isoformat``'s text of the naive UTC time,
    which ``strftime("%Y-%m-%dT%H:%M:%S.%fZ")`` gave for any year from 1000, made from
    its fields by ``%`` at half the instructions of converting it and ``isoformat``
    (tests/test_ledger_canonical.py holds the texts equal). Django's own times are UTC
    already, and are not converted."""
    if at.tzinfo is not UTC:
        at = at.astimezone(UTC)
    return "%04d-%02d-%02dT%02d:%02d:%02d.%06dZ" % (at.year, at.month, at.day, at.hour, at.minute, at.second, at.microsecond)  # noqa: UP031 - half an f-string's instructions


# The date and time of day of the second ``_stamp_now`` last wrote, by that second.
_seconds: dict[int, str] = {}


def _stamp_now() -> str:
    """The time now as ``timestamp`` writes it, from the clock's microseconds, its date
    and time of day written once a second: ``datetime.now(UTC)`` and ``timestamp``'s
    formatting of its seven fields cost an entry some 14,000 instructions, this some
    4,700 (tests/test_ledger_canonical.py holds the two equal)."""
    micro = time.time_ns() // 1000
    second = micro // 1_000_000
    prefix = _seconds.get(second)
    if prefix is None:
        _seconds.clear()
        prefix = _seconds[second] = time.strftime("%Y-%m-%dT%H:%M:%S.", time.gmtime(second))
    return "%s%06dZ" % (prefix, micro % 1_000_000)  # noqa: UP031 - as ``timestamp``


def _time_of(stamp: str) -> datetime:
    """The time ``stamp`` (``timestamp``'s text) is of, for the statements that take a time."""
    return datetime.fromisoformat(stamp)


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
