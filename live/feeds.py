"""What live viewers are sent, read from the database once per process.

A broadcast is a doorbell (runs.persistence.broadcast): "run R has events up to seq N", or "the
lists changed". It carries nothing a viewer is sent. Each web process keeps one
feed per run that has viewers here, and one for the list pages; a feed hears its
doorbells through the process's hub of the doorbells group (live.fanout: a run's
feed its own run's, the lists' feed every one), reads what is new
after its own high-water mark from the database, once, and hands the same page
to every viewer, who sends only what follows its own cursor. So a lost, late or
reordered doorbell can delay what a viewer sees, never change it: the next
doorbell, or the feed's recheck after an interval without any, reads again.

A run feed's page is contiguous by construction (``read_page`` keeps only the run
of seqs that follows the mark), so nothing downstream ever holds a batch with a
hole in it. The feed keeps the latest ``WINDOW_EVENTS`` of what it read as one such
page (its window): a viewer that comes back a moment later (a page reconnecting)
is sent what it lacks from there, and reads the database itself only for what is
older. The list pages are told "changed" when the lists' version (what every
change they show moves: a run's events, the switch) differs from what their page
was last told; they refetch themselves with their viewer's permissions."""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from abc import abstractmethod
from collections import OrderedDict
from collections.abc import Callable, Hashable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, ParamSpec, Protocol, TypeVar

from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, connections
from django.db.models import Count, Sum

from common.metrics import LIVE_LAG
from live import fanout
from live.sharing import Registry, Shared
from live.trace import REPLAY_PAGE, present
from runs.models import Event, GlobalSwitch, Run
from runs.persistence.broadcast import DOORBELLS_GROUP, run_group
from runs.persistence.rows import checkpoint_cursor, db_value

log = logging.getLogger(__name__)
# The lists' version is an aggregate over every run: read at most this often, the
# changes of a busy spell are told in one "changed" (the pages wait 0.6 s to refetch).
LISTS_ROUND_SECONDS = 0.25
# The events a run feed keeps, presented and encoded, for viewers a little behind.
WINDOW_EVENTS = 2000
# Full replay pages kept for viewers replaying the same stretch of a log (pages
# opening together, clients resubscribing from the start).
REPLAY_PAGES = 16


@dataclass
class Page:
    """Stored events ``first`` .. ``last`` of a run, without a gap, each presented
    and encoded once for every viewer of the process."""

    first: int
    parts: list[str]  # each event's JSON text
    full: bool  # the read was cut at its limit: more may follow
    newest: float = 0.0  # the time of its last event (the live delivery lag's start)
    # The message of all its events, kept: a feed's page goes whole to every viewer
    # that is up to date. From other cursors (a shared replay page) it is built each time.
    _whole: str | None = field(default=None, repr=False)

    @property
    def last(self) -> int:
        return self.first + len(self.parts) - 1

    def covers(self, cursor: int) -> bool:
        """Whether this page holds the event after ``cursor``."""
        return self.first <= cursor + 1 <= self.last

    def then(self, page: Page, keep: int) -> Page:
        """This page followed by ``page`` (which must start where this one ends),
        cut to its last ``keep`` events."""
        parts = (self.parts + page.parts)[-keep:]
        return Page(page.last - len(parts) + 1, parts, full=page.full, newest=page.newest)

    def text_after(self, cursor: int) -> str:
        """The ``events`` message of this page's events after ``cursor``, which
        must be in ``first - 1 .. last - 1``."""
        whole = cursor + 1 == self.first
        if whole and self._whole is not None:
            return self._whole
        events = ",".join(self.parts[cursor + 1 - self.first :])
        text = f'{{"type": "events", "events": [{events}]}}'
        if whole:
            self._whole = text
        return text


def contiguous_after(after: int, seqs: list[int]) -> int:
    """How many of ``seqs`` (ascending) run on from ``after`` without a gap."""
    count = 0
    for seq in seqs:
        if seq != after + count + 1:
            break
        count += 1
    return count


def read_page(run_id: str, after: int) -> Page | None:
    """The stored events after ``after``, up to a replay page of them, as one page;
    None if there are none. The events of a run commit in seq order (numbered under
    the run row's lock, held to the commit), so what a read sees is always the log
    up to some seq; the page is cut at a gap all the same, so that a page with a hole
    cannot exist whatever the database does."""
    connection = connections[DEFAULT_DB_ALIAS]
    sql, converters, compiler = _page_statement(connection)
    with checkpoint_cursor(connection) as cursor:
        cursor.execute(sql, [db_value(connection, _RUN, run_id), after])
        rows = list(compiler.apply_converters(cursor.fetchall(), converters))
    count = contiguous_after(after, [row[1] for row in rows])
    if not count:
        return None
    run = str(run_id)
    parts = [
        json.dumps(present({"run_id": run, "seq": seq, "type": kind, "call_id": call, "ts": ts.isoformat(), "payload": payload}))
        for _, seq, kind, call, ts, payload in rows[:count]
    ]
    return Page(after + 1, parts, full=len(rows) == REPLAY_PAGE, newest=rows[count - 1][4].timestamp())


_RUN = Event._meta.get_field("run")
_page_statements: dict[str, tuple[str, Any, Any]] = {}


def _page_statement(connection: Any) -> tuple[str, Any, Any]:
    """The ORM's own SELECT of a page, its column converters and its compiler, made
    once per database: building the query on every read cost five times running it,
    at a read per doorbell."""
    found = _page_statements.get(connection.vendor)
    if found is None:
        columns = ("run_id", "seq", "type", "call_id", "ts", "payload")
        query = Event.objects.filter(run_id=uuid.UUID(int=0), seq__gt=0).order_by("seq").values_list(*columns)[:REPLAY_PAGE].query
        compiler = query.get_compiler(connection=connection)
        sql, params = compiler.as_sql()
        assert len(params) == 2, sql  # run id, then seq: the values read_page passes
        converters = compiler.get_converters([column for column, _, _ in compiler.select])
        found = _page_statements[connection.vendor] = (sql, converters, compiler)
    return found


# (run, start) -> the full page of events after ``start``, a multiple of REPLAY_PAGE.
# Only a page of exactly REPLAY_PAGE events is kept: seqs start+1 .. start+REPLAY_PAGE,
# read without a gap, so what a key names cannot be short or holed, and stored events
# never change.
_replays: OrderedDict[tuple[str, int], Page] = OrderedDict()


async def replay_page(run_id: str, after: int) -> Page | None:
    """A page holding the events after ``after`` (sent from there: Page.text_after),
    for a viewer catching up; None if none is stored yet. Pages start at multiples of
    REPLAY_PAGE, so viewers catching up from different seqs read, mark (core.visible)
    and encode each stored event once between them, not once each: with two dozen
    viewers reconnecting at random seqs, reads from each viewer's own seq kept the
    replay thread busy past what the viewers could wait. On the event loop (the
    cache is the loop's)."""
    start = after - after % REPLAY_PAGE
    key = (run_id, start)
    page = _replays.get(key)
    if page is not None:
        _replays.move_to_end(key)
    else:
        page = await on_replay_thread(read_page, run_id, start)
        if page is not None and page.full:
            _replays[key] = page
            if len(_replays) > REPLAY_PAGES:
                _replays.popitem(last=False)
    if page is None or page.last <= after:
        return None  # nothing stored after ``after`` yet: the feed brings it when it is
    return page


def stored_last_seq(run_id: str) -> int:
    return int(Run.objects.filter(pk=run_id).values_list("last_seq", flat=True).first() or 0)


@dataclass(frozen=True)
class ListsVersion:
    """What moves with every change the list pages show, project by project: a run's
    events (a request's filing, decision, lapse and use are events of its run), its
    creation and deletion; and the global switch, which every list page shows."""

    switched: str
    projects: tuple[tuple[int, int, int], ...]  # (project id, runs, sum of their last_seq), by id

    def seen_by(self, project_ids: frozenset[int] | None) -> Hashable:
        """The part of the version a viewer of ``project_ids`` (None: every project) sees."""
        return self.switched, tuple(p for p in self.projects if project_ids is None or p[0] in project_ids)


def lists_version() -> ListsVersion:
    rows = Run.objects.order_by("project_id").values("project_id").annotate(count=Count("pk"), seqs=Sum("last_seq"))
    switched = GlobalSwitch.objects.filter(pk=1).values_list("changed_at", flat=True).first()
    return ListsVersion(str(switched), tuple((int(r["project_id"]), int(r["count"]), int(r["seqs"] or 0)) for r in rows))


# The feeds' reads, the viewers' replays and the sockets' session rechecks at each
# heartbeat run on a thread each of their own that keeps its database connection
# while any feed exists (a socket beats only while it is in a feed): channels'
# database_sync_to_async closes the connection after each call where connections are
# not kept (SQLite's CONN_MAX_AGE of 0), and opening one cost ten times the read, at
# a read per doorbell, and a third of a recheck's CPU, at a recheck per socket per
# beat. Nor do they queue on Django's one thread for sync code, behind (or in front
# of) page views and every socket's sign-in: a feed's read is not held up by a
# replay or a recheck, nor a page's reconnect by a replay of someone else's.
_feed_thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="feed-reads")
_replay_thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="replays")
_recheck_thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="session-rechecks")
P = ParamSpec("P")
R = TypeVar("R")


async def _on(thread: ThreadPoolExecutor, read: Callable[P, R], *args: P.args, **kwargs: P.kwargs) -> R:
    return await sync_to_async(_dropping_a_broken_connection(read), thread_sensitive=False, executor=thread)(*args, **kwargs)


async def on_feed_thread(read: Callable[P, R], *args: P.args, **kwargs: P.kwargs) -> R:
    return await _on(_feed_thread, read, *args, **kwargs)


async def on_replay_thread(read: Callable[P, R], *args: P.args, **kwargs: P.kwargs) -> R:
    return await _on(_replay_thread, read, *args, **kwargs)


async def on_recheck_thread(read: Callable[P, R], *args: P.args, **kwargs: P.kwargs) -> R:
    return await _on(_recheck_thread, read, *args, **kwargs)


def _dropping_a_broken_connection(read: Callable[P, R]) -> Callable[P, R]:
    def call(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return read(*args, **kwargs)
        except Exception:
            # The database restarted, say: the next read opens a connection afresh.
            connections[DEFAULT_DB_ALIAS].close()
            raise

    return call


def close_connection() -> None:
    connections[DEFAULT_DB_ALIAS].close()


class RunViewer(Protocol):
    async def offer(self, page: Page) -> None: ...

    async def show_output(self, output: dict[str, Any]) -> None: ...


class ListsViewer(Protocol):
    async def changed(self, version: ListsVersion) -> None: ...


V = TypeVar("V")


class Feed(Shared[V]):
    """Doorbells for this process's viewers (its members): joins the doorbells group
    once, reads the database on a doorbell (one read at a time; another if one rang
    meanwhile) and after an interval without any, and hands what it read to each
    viewer in turn."""

    group: str  # what its log lines name it by
    recheck_seconds: float

    def groups(self) -> list[tuple[str, str | None]]:
        """The groups it hears, each with the run whose messages it hears there (None: all)."""
        return [(DOORBELLS_GROUP, None)]

    def __init__(self, layer: Any, key: str) -> None:
        super().__init__()
        self.layer, self.key = layer, key
        self.heard = False  # a doorbell rang since the last recheck
        self.again = False  # a doorbell rang during the read under way
        self.reading: asyncio.Task[None] | None = None
        self.rechecks: asyncio.Task[None] | None = None
        self.ready = asyncio.ensure_future(self._start())

    async def _start(self) -> None:
        # In the groups before the first read: whatever commits after that read rings here.
        for group, run in self.groups():
            await fanout.join(self.layer, group, self, run)
        await self.start()
        self.rechecks = asyncio.create_task(self._recheck())
        if self.again:
            self.read_soon()

    @abstractmethod
    async def start(self) -> None:
        """Read the high-water mark to start from."""

    @abstractmethod
    async def read(self) -> None:
        """Read what is new and hand it to the viewers."""

    @abstractmethod
    async def hear(self, message: dict[str, Any]) -> None:
        """A message to the group, from the hub's task (live.fanout): must not wait
        for the database (it calls ``rang``)."""

    def rang(self) -> None:
        self.heard = self.again = True
        if self.ready.done():
            self.read_soon()

    def read_soon(self) -> None:
        if self.reading is None or self.reading.done():
            self.reading = asyncio.create_task(self._read())

    async def _read(self) -> None:
        try:
            while True:
                self.again = False
                await self.read()
                if not self.again:
                    return
        except Exception:  # the next doorbell or recheck reads again
            log.warning("reading the feed of %s failed", self.group, exc_info=True)

    async def _recheck(self) -> None:
        # A lost doorbell shows at the next one; a lost *last* one (a run's stop) has
        # no next one. While doorbells ring the database is not read for nothing.
        while True:
            await asyncio.sleep(self.recheck_seconds)
            if self.heard:
                self.heard = False
                continue
            self.read_soon()

    async def close(self) -> None:
        for task in (self.ready, self.rechecks, self.reading):
            if task is not None:
                task.cancel()
        for group, _ in self.groups():
            await fanout.leave(self.layer, group, self)


class RunFeed(Feed[RunViewer]):
    def __init__(self, layer: Any, key: str) -> None:
        self.group = run_group(key)
        self.recheck_seconds = float(settings.HARNESS_TRACE_RECHECK_SECONDS)
        self.mark = 0  # the last seq this feed read
        self.window: Page | None = None  # the latest of what it read, up to the mark
        super().__init__(layer, key)

    def groups(self) -> list[tuple[str, str | None]]:
        # Its run's doorbells come with every other run's; its output has a group of its own.
        return [(DOORBELLS_GROUP, self.key), (self.group, None)]

    async def start(self) -> None:
        self.mark = await on_feed_thread(stored_last_seq, self.key)

    async def hear(self, message: dict[str, Any]) -> None:
        """A message about the run, from the hub's task: never waits for the database."""
        if message["type"] == "run.doorbell":
            if message["last_seq"] > self.mark:
                self.rang()
            else:
                self.heard = True
        elif message["type"] == "run.output":
            # Ephemeral, and the page shows it only on a call it has: not held back.
            output = message["output"]
            await self.each(lambda viewer: viewer.show_output(output))

    async def read(self) -> None:
        page = await on_feed_thread(read_page, self.key, self.mark)
        if page is not None:
            self.window = page if self.window is None else self.window.then(page, WINDOW_EVENTS)
            self.mark = page.last
            self.again = self.again or page.full
        # Also when nothing is new: a viewer left behind (a catch-up of its own that
        # failed) takes the window as its cue to catch up.
        window = self.window
        if window is not None:
            await self.each(lambda viewer: viewer.offer(window))
        if page is not None:
            LIVE_LAG.observe(max(0.0, time.time() - page.newest))


class ListsFeed(Feed[ListsViewer]):
    group = DOORBELLS_GROUP

    def __init__(self, layer: Any, key: str) -> None:
        self.recheck_seconds = float(settings.HARNESS_TRACE_RECHECK_SECONDS)
        self.version: ListsVersion | None = None
        super().__init__(layer, key)

    async def start(self) -> None:
        self.version = await on_feed_thread(lists_version)

    async def hear(self, message: dict[str, Any]) -> None:
        # Any run's doorbell, or the switch's "changed".
        self.rang()

    async def read(self) -> None:
        version = await on_feed_thread(lists_version)
        if version != self.version:
            self.version = version
            await self.each(lambda viewer: viewer.changed(version))
        await asyncio.sleep(LISTS_ROUND_SECONDS)


F = TypeVar("F", bound=Feed[Any])
# (feed class, layer, key) -> feed.
_feeds: Registry[tuple[type[Feed[Any]], int, str], Feed[Any]] = Registry()


async def join(kind: type[F], layer: Any, key: str, viewer: Any) -> F:
    """The process's feed of ``kind`` for ``key``, with ``viewer`` among its viewers.
    Returns once the feed has its starting mark: whatever commits from now on
    reaches the viewer through it."""
    feed = await _feeds.join((kind, id(layer), key), lambda: kind(layer, key), viewer)
    assert isinstance(feed, kind)
    return feed


async def leave(kind: type[Feed[Any]], layer: Any, key: str, viewer: Any) -> None:
    if await _feeds.leave((kind, id(layer), key), viewer) and not _feeds:
        for thread in (_feed_thread, _replay_thread, _recheck_thread):
            await _on(thread, close_connection)
