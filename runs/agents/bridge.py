"""The bridge between a run's MCP endpoint (the web process, async) and its proposer (the
worker driving the run, sync), on Redis (docs/design.md, Agents).

Each key is under ``harness:agent:<run id>:``:

- ``queue``: a list of request ids, oldest first: the run's calls not answered yet. Its
  head is the call the run proposes now (or will propose next). Only an answer takes a
  request off it, never the taking, so a call taken by a worker that died is still
  there for the worker that takes the run over (the proposer's snapshot says which
  request its checkpointed proposal was; runs.agents.proposer).
- ``req:<id>``: a hash: ``tool``, ``args`` (canonical JSON), ``digest`` (of both),
  ``state`` (``queued``, ``taken``, ``answered``), ``created``, ``taken``, ``reply``
  (JSON: ``text``, ``is_error``, ``kind``).
- ``dedupe:<digest>``: the id of the request for this tool and these arguments, from
  its submission until a client has been handed its answer: a client that timed out
  and calls again with the same arguments attaches to the same request, which stays
  one request (one proposal, performed at most once).
- ``wake``: at most one element, pushed by every submission, so a worker waiting for
  the next call blocks on it (BLPOP) and takes the call as soon as it is queued.
- ``done:<id>``: one element, pushed with the request's answer: a client waiting for
  the answer blocks on it (BLMOVE from the list to itself, so the element stays and
  every client waiting on the same request wakes) and reads the answer as soon as it
  is written, never polling for it.
- ``tools``: the run's tools as its worker made them (with the project's MCP tools,
  which only the worker can list), for ``tools/list``.

Every change of more than one key is one Lua script (Redis runs a script alone: no
other client's command comes between its commands), so each is its own lock: the
scripts below are the only claims there are, and each says what it decides. Sizes are
bounded: a call's arguments, the queue's length, a reply's text, the tool list; every
key expires (``TTL``), a run's keys outliving it by a day at most."""

from __future__ import annotations

import functools
import hashlib
import json
import time
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, cast

import redis
from django.conf import settings

from core.jsonutil import JSON, canonical_json

if TYPE_CHECKING:
    import redis.asyncio as aioredis

# A call's arguments, as canonical JSON; a larger call is refused before it is queued.
MAX_ARGS_BYTES = 1024 * 1024
MAX_TOOL_CHARS = 200
# Calls of one run waiting at once (an agent may send several in parallel; the run
# takes them one at a time, in order).
MAX_QUEUED = 16
# The text of one answer (the run's own output cap bounds it well below this already).
MAX_REPLY_CHARS = 400_000
MAX_TOOLS_BYTES = 4 * 1024 * 1024
# How long a run's keys live unless touched again, and an answered request after its answer.
TTL = 24 * 3600
ANSWERED_TTL = 3600


class CallRefused(Exception):
    """A call the bridge does not queue (too large, too many waiting)."""


@dataclass(frozen=True)
class Taken:
    request_id: str
    tool: str
    args: dict[str, JSON]


@dataclass(frozen=True)
class Submitted:
    request_id: str
    # ``attached``: the same call (tool and arguments) was already waiting, or answered
    # and not yet handed to a client; this is that request.
    how: Literal["new", "attached"]


@dataclass(frozen=True)
class Request:
    request_id: str
    tool: str
    state: str  # queued, taken, answered
    reply: dict[str, Any] | None
    ahead: int  # requests of the run before it in the queue


def prefix(run_id: str) -> str:
    return f"harness:agent:{run_id}:"


def digest(tool: str, args: JSON) -> str:
    return hashlib.sha256(f"{tool}\0{canonical_json(args)}".encode()).hexdigest()


def reply(text: str, is_error: bool, kind: str) -> str:
    clipped = text if len(text) <= MAX_REPLY_CHARS else text[:MAX_REPLY_CHARS] + "\n[harness] (answer cut here)"
    return json.dumps({"text": clipped, "is_error": is_error, "kind": kind})


# Submit a call. The dedupe key decides whether this is a new request: it is read and
# set here with the queue's length checked, in one script, so two identical calls
# arriving at once make one request between them and the queue never exceeds its bound.
# KEYS: queue, dedupe, wake. ARGV: prefix, id, tool, args, digest, now, max queued, ttl.
_SUBMIT = """
local held = redis.call('GET', KEYS[2])
if held and redis.call('EXISTS', ARGV[1] .. 'req:' .. held) == 1 then
  redis.call('EXPIRE', KEYS[2], ARGV[8])
  return {held, 'attached'}
end
if redis.call('LLEN', KEYS[1]) >= tonumber(ARGV[7]) then
  return {'', 'full'}
end
local req = ARGV[1] .. 'req:' .. ARGV[2]
redis.call('HSET', req, 'tool', ARGV[3], 'args', ARGV[4], 'digest', ARGV[5], 'state', 'queued', 'created', ARGV[6])
redis.call('EXPIRE', req, ARGV[8])
redis.call('RPUSH', KEYS[1], ARGV[2])
redis.call('EXPIRE', KEYS[1], ARGV[8])
redis.call('SET', KEYS[2], ARGV[2], 'EX', ARGV[8])
redis.call('DEL', KEYS[3])
redis.call('RPUSH', KEYS[3], '1')
redis.call('EXPIRE', KEYS[3], ARGV[8])
return {ARGV[2], 'new'}
"""

# The worker takes the head of the queue: the call it proposes next. Taking marks it
# ``taken`` (for the waiting client's progress) and leaves it on the queue: only the
# lease-holding worker drives the run (runs.scheduling.leases), so no second taker
# competes, and a worker that dies after taking leaves the call to its successor.
# Ids whose request expired are dropped. KEYS: queue. ARGV: prefix, now.
_TAKE = """
while true do
  local id = redis.call('LINDEX', KEYS[1], 0)
  if not id then return false end
  local req = ARGV[1] .. 'req:' .. id
  if redis.call('EXISTS', req) == 1 then
    if redis.call('HGET', req, 'state') == 'queued' then
      redis.call('HSET', req, 'state', 'taken', 'taken', ARGV[2])
    end
    return {id, redis.call('HGET', req, 'tool'), redis.call('HGET', req, 'args')}
  end
  redis.call('LPOP', KEYS[1])
end
"""

# Answer a request, once: the first answer stands (the worker's, or the endpoint's when
# the run ended without one) and a second is ignored, so a resumed worker answering the
# call again changes nothing. The request leaves the queue with its answer, and its
# ``done`` list wakes every client waiting for it; its dedupe key stays until a client
# is handed the answer (_HANDED).
# KEYS: queue. ARGV: prefix, id, reply, answered ttl.
_ANSWER = """
local req = ARGV[1] .. 'req:' .. ARGV[2]
if redis.call('EXISTS', req) == 0 then
  redis.call('LREM', KEYS[1], 0, ARGV[2])
  return 0
end
if redis.call('HGET', req, 'state') == 'answered' then
  return 0
end
redis.call('HSET', req, 'state', 'answered', 'reply', ARGV[3])
redis.call('EXPIRE', req, ARGV[4])
redis.call('LREM', KEYS[1], 0, ARGV[2])
local done = ARGV[1] .. 'done:' .. ARGV[2]
redis.call('RPUSH', done, '1')
redis.call('EXPIRE', done, ARGV[4])
local dedupe = ARGV[1] .. 'dedupe:' .. redis.call('HGET', req, 'digest')
if redis.call('GET', dedupe) == ARGV[2] then
  redis.call('EXPIRE', dedupe, ARGV[4])
end
return 1
"""

# A client is handed the answer: the answer, if there is one yet, and from now on the
# same call made again is a new request (the agent reading a file again after changing
# it). Read and released in one script, so no new request takes the dedupe key between
# the two; only this request's key is removed, never a newer one's. ARGV: prefix, id.
_HANDED = """
local req = ARGV[1] .. 'req:' .. ARGV[2]
local found = redis.call('HMGET', req, 'state', 'reply', 'digest')
if found[1] ~= 'answered' then
  return false
end
local dedupe = ARGV[1] .. 'dedupe:' .. found[3]
if redis.call('GET', dedupe) == ARGV[2] then
  redis.call('DEL', dedupe)
end
return found[2]
"""


def _checked_call(tool: str, args: JSON) -> tuple[str, str]:
    """The call's canonical arguments and digest, or CallRefused naming the bound."""
    if len(tool) > MAX_TOOL_CHARS:
        raise CallRefused(f"the tool's name is {len(tool)} characters long; at most {MAX_TOOL_CHARS}")
    text = canonical_json(args)
    size = len(text.encode())
    if size > MAX_ARGS_BYTES:
        raise CallRefused(f"the arguments are {size} bytes as JSON; a call may have at most {MAX_ARGS_BYTES} (nothing was queued)")
    return text, digest(tool, args)


def _submit_keys_and_args(prefix: str, tool: str, args: JSON) -> tuple[str, ...]:
    """The submit script's three keys and its arguments, for either side of the bridge."""
    text, key = _checked_call(tool, args)
    keys = (prefix + "queue", prefix + "dedupe:" + key, prefix + "wake")
    return (*keys, prefix, uuid.uuid4().hex, tool, text, key, str(time.time()), str(MAX_QUEUED), str(TTL))


def _decoded(value: bytes | str | None) -> str:
    return value.decode() if isinstance(value, bytes) else (value or "")


@functools.cache
def _client() -> redis.Redis:
    return redis.Redis.from_url(settings.REDIS_URL, socket_timeout=10, socket_connect_timeout=5)


class Bridge:
    """The worker's side (and the tests'): synchronous."""

    def __init__(self, run_id: str, client: redis.Redis | None = None) -> None:
        self.run_id = run_id
        self.prefix = prefix(run_id)
        self.redis = client or _client()

    def submit(self, tool: str, args: JSON) -> Submitted:
        found = self.redis.eval(_SUBMIT, 3, *_submit_keys_and_args(self.prefix, tool, args))
        return _submitted(found)

    def take(self) -> Taken | None:
        found = cast(list[bytes] | None, self.redis.eval(_TAKE, 1, self.prefix + "queue", self.prefix, str(time.time())))
        if not found:
            return None
        request_id, tool, args = (_decoded(part) for part in found)
        parsed = json.loads(args) if args else {}
        return Taken(request_id, tool, parsed if isinstance(parsed, dict) else {})

    def wait(self, seconds: float) -> None:
        """Until a call is submitted or ``seconds`` pass."""
        # Redis takes a blocking command's timeout in fractions of a second; 0 would mean forever.
        self.redis.blpop([self.prefix + "wake"], timeout=max(0.01, seconds))

    def answer(self, request_id: str, text: str, is_error: bool, kind: str) -> bool:
        done = self.redis.eval(_ANSWER, 1, self.prefix + "queue", self.prefix, request_id, reply(text, is_error, kind), str(ANSWERED_TTL))
        return bool(done)

    def handed(self, request_id: str) -> dict[str, Any] | None:
        """The request's answer, handed to a client (None while it has none)."""
        return _reply(cast(bytes | None, self.redis.eval(_HANDED, 0, self.prefix, request_id)))

    def request(self, request_id: str) -> Request | None:
        raw = cast(dict[bytes, bytes], self.redis.hgetall(self.prefix + "req:" + request_id))
        fields = {_decoded(k): _decoded(v) for k, v in raw.items()}
        queue = [_decoded(i) for i in cast(list[bytes], self.redis.lrange(self.prefix + "queue", 0, MAX_QUEUED))]
        return _request(request_id, fields, queue)

    def publish_tools(self, tools: list[dict[str, JSON]]) -> None:
        text = json.dumps(tools)
        if len(text) > MAX_TOOLS_BYTES:
            raise CallRefused(f"the run's tools take {len(text)} bytes as JSON; at most {MAX_TOOLS_BYTES}")
        self.redis.set(self.prefix + "tools", text, ex=TTL)

    def queued(self) -> list[str]:
        return [_decoded(i) for i in cast(list[bytes], self.redis.lrange(self.prefix + "queue", 0, -1))]


def _submitted(found: Any) -> Submitted:
    request_id, how = (_decoded(part) for part in found)
    if how == "full":
        raise CallRefused(f"{MAX_QUEUED} calls of this run are waiting already; wait for their answers before calling again")
    return Submitted(request_id, "attached" if how == "attached" else "new")


def _reply(raw: bytes | str | None) -> dict[str, Any] | None:
    parsed = json.loads(raw) if raw else None
    return parsed if isinstance(parsed, dict) else None


def _request(request_id: str, fields: dict[str, str], queue: list[str]) -> Request | None:
    if not fields:
        return None
    ahead = queue.index(request_id) if request_id in queue else 0
    return Request(request_id, fields.get("tool", ""), fields.get("state", ""), _reply(fields.get("reply")), ahead)


class AsyncBridge:
    """The endpoint's side: the same scripts over redis.asyncio, one client per event loop."""

    _clients: dict[int, aioredis.Redis] = {}

    def __init__(self, run_id: str, client: aioredis.Redis | None = None) -> None:
        import asyncio

        import redis.asyncio as aioredis

        self.run_id = run_id
        self.prefix = prefix(run_id)
        if client is None:
            loop = id(asyncio.get_running_loop())
            if loop not in self._clients:
                self._clients[loop] = aioredis.Redis.from_url(settings.REDIS_URL, socket_timeout=10, socket_connect_timeout=5)
            client = self._clients[loop]
        self.redis = client

    async def submit(self, tool: str, args: JSON) -> Submitted:
        found = await self.redis.eval(_SUBMIT, 3, *_submit_keys_and_args(self.prefix, tool, args))  # type: ignore[misc]
        return _submitted(found)

    async def request(self, request_id: str) -> Request | None:
        raw = await self.redis.hgetall(self.prefix + "req:" + request_id)  # type: ignore[misc]
        fields = {_decoded(k): _decoded(v) for k, v in raw.items()}
        queue = [_decoded(i) for i in await self.redis.lrange(self.prefix + "queue", 0, MAX_QUEUED)]  # type: ignore[misc]
        return _request(request_id, fields, queue)

    async def answer(self, request_id: str, text: str, is_error: bool, kind: str) -> bool:
        done = await self.redis.eval(  # type: ignore[misc]
            _ANSWER, 1, self.prefix + "queue", self.prefix, request_id, reply(text, is_error, kind), str(ANSWERED_TTL)
        )
        return bool(done)

    async def handed(self, request_id: str) -> dict[str, Any] | None:
        """The request's answer, handed to a client (None while it has none)."""
        return _reply(await self.redis.eval(_HANDED, 0, self.prefix, request_id))  # type: ignore[misc]

    async def answer_within(self, request_id: str, seconds: float) -> dict[str, Any] | None:
        """The request's answer, handed to this client, as soon as it is written, or
        None if it is not within ``seconds``."""
        done = self.prefix + "done:" + request_id
        # One round trip: Redis runs a connection's commands in order, so the answer is
        # read (and handed over) as soon as the wait ends, whether woken or not.
        async with self.redis.pipeline(transaction=False) as pipe:
            # The list to itself: its one element stays for the request's other waiters.
            pipe.execute_command("BLMOVE", done, done, "LEFT", "RIGHT", max(0.01, seconds))
            pipe.eval(_HANDED, 0, self.prefix, request_id)
            _woken, raw = await pipe.execute()
        return _reply(raw)

    async def tools(self) -> list[dict[str, Any]] | None:
        raw = await self.redis.get(self.prefix + "tools")
        if raw is None:
            return None
        parsed = json.loads(raw)
        return parsed if isinstance(parsed, list) else None
