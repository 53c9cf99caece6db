"""The bridge between a run's MCP endpoint and its proposer (runs.agents.bridge), on the
local Redis: a call made again while it waits is the same request; sizes are bounded;
a call taken and not answered is taken again (a worker that died), answered once."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator

import pytest
import redis
import redis.asyncio as aioredis
from django.conf import settings

from core import feedback as fb
from core.tools import Args, ToolSpec
from runs.agents.bridge import MAX_ARGS_BYTES, MAX_QUEUED, AsyncBridge, Bridge, CallRefused, prefix
from runs.agents.proposer import AgentProposer


@pytest.fixture
def bridge() -> Iterator[Bridge]:
    run_id = str(uuid.uuid4())
    client = redis.Redis.from_url(settings.REDIS_URL)
    yield Bridge(run_id, client)
    keys = list(client.scan_iter(match=prefix(run_id) + "*"))
    if keys:
        client.delete(*keys)


def test_it_attaches_the_same_call_to_one_request_until_its_answer_is_handed_over(bridge: Bridge) -> None:
    first = bridge.submit("read_file", {"path": "a.py", "x": [1, 2]})
    again = bridge.submit("read_file", {"x": [1, 2], "path": "a.py"})  # the same arguments, in another order
    other = bridge.submit("read_file", {"path": "b.py"})
    assert (first.how, again.how, other.how) == ("new", "attached", "new")
    assert again.request_id == first.request_id and other.request_id != first.request_id
    assert bridge.queued() == [first.request_id, other.request_id]
    taken = bridge.take()
    assert taken is not None and taken.request_id == first.request_id and taken.args == {"path": "a.py", "x": [1, 2]}
    assert bridge.answer(first.request_id, "the file", False, "result")
    assert not bridge.answer(first.request_id, "a second answer", True, "result")  # the first stands
    request = bridge.request(first.request_id)
    assert request is not None and request.reply == {"text": "the file", "is_error": False, "kind": "result"}
    assert bridge.queued() == [other.request_id]
    # Answered but not handed to a client yet: a call again gets that answer.
    assert bridge.submit("read_file", {"path": "a.py", "x": [1, 2]}).request_id == first.request_id
    assert bridge.handed(first.request_id) == {"text": "the file", "is_error": False, "kind": "result"}
    fresh = bridge.submit("read_file", {"path": "a.py", "x": [1, 2]})
    assert fresh.how == "new" and fresh.request_id != first.request_id


def test_it_wakes_every_client_waiting_for_a_request_when_it_is_answered_and_no_other(bridge: Bridge) -> None:
    submitted = bridge.submit("read_file", {"path": "a.py"})
    other = bridge.submit("read_file", {"path": "b.py"})

    async def waiting() -> tuple[list[dict[str, object] | None], float, dict[str, object] | None]:
        client = aioredis.Redis.from_url(settings.REDIS_URL)
        try:
            side = AsyncBridge(bridge.run_id, client)
            assert await side.answer_within(submitted.request_id, 0.05) is None  # no answer yet: the slice runs out
            # Two clients on the same request (one called again after its timeout) and one on another.
            waiters = [asyncio.ensure_future(side.answer_within(submitted.request_id, 20)) for _ in range(2)]
            unanswered = asyncio.ensure_future(side.answer_within(other.request_id, 1))
            await asyncio.sleep(0.1)
            answered_at = time.monotonic()
            await asyncio.to_thread(bridge.answer, submitted.request_id, "the file", False, "result")
            woken = await asyncio.gather(*waiters)
            return woken, time.monotonic() - answered_at, await unanswered
        finally:
            await client.aclose()

    woken, after, unanswered = asyncio.run(waiting())
    assert woken == [{"text": "the file", "is_error": False, "kind": "result"}] * 2
    assert after < 10  # woken by the answer, not by the end of their 20-second wait
    assert unanswered is None
    # Handed over: the same call again is a new request.
    assert bridge.submit("read_file", {"path": "a.py"}).how == "new"


def test_it_refuses_oversized_arguments_and_a_full_queue(bridge: Bridge) -> None:
    with pytest.raises(CallRefused, match="bytes as JSON"):
        bridge.submit("write_file", {"path": "a", "content": "x" * MAX_ARGS_BYTES})
    with pytest.raises(CallRefused, match="characters long"):
        bridge.submit("x" * 500, {})
    for n in range(MAX_QUEUED):
        bridge.submit("read_file", {"path": f"{n}.py"})
    with pytest.raises(CallRefused, match="waiting already"):
        bridge.submit("read_file", {"path": "one-more.py"})
    assert len(bridge.queued()) == MAX_QUEUED
    # A call already waiting still attaches.
    assert bridge.submit("read_file", {"path": "0.py"}).how == "attached"


def test_it_gives_a_call_taken_by_a_worker_that_died_to_the_next_one_and_answers_it_once(bridge: Bridge) -> None:
    submitted = bridge.submit("read_file", {"path": "a.py"})
    crashed = AgentProposer(bridge.run_id, preset="mcp-client", tools=[], snapshot={}, bridge=bridge)
    assert crashed.propose(None) == {"tool": "read_file", "args": {"path": "a.py"}}
    # It died before its checkpoint: its successor starts from the snapshot before it.
    successor = AgentProposer(bridge.run_id, preset="mcp-client", tools=[], snapshot={}, bridge=bridge)
    assert successor.propose(None) == {"tool": "read_file", "args": {"path": "a.py"}}
    assert successor.snapshot()["awaiting"] == submitted.request_id
    # It checkpointed that proposal and died too: the next one answers it.
    bridge.submit("finish", {"summary": "done"})
    resumed = AgentProposer(bridge.run_id, preset="mcp-client", tools=[], snapshot=successor.snapshot(), bridge=bridge)
    result = fb.Result(call_id="c1", tool="read_file", revision="r1", data={"content": "print(1)"}, artifacts=[])
    assert resumed.propose(result) == {"tool": "finish", "args": {"summary": "done"}}
    answered = bridge.request(submitted.request_id)
    assert answered is not None and answered.reply is not None
    assert answered.reply["kind"] == "result" and "print(1)" in answered.reply["text"] and not answered.reply["is_error"]
    # Resumed again from that older snapshot, it answers the same call again: nothing changes.
    again = AgentProposer(bridge.run_id, preset="mcp-client", tools=[], snapshot=successor.snapshot(), bridge=bridge)
    assert again.propose(fb.InvalidInput(call_id="c1", problems=[])) == {"tool": "finish", "args": {"summary": "done"}}
    kept = bridge.request(submitted.request_id)
    assert kept is not None and kept.reply == answered.reply


def test_it_proposes_a_call_made_by_the_agents_name_under_the_registrys(bridge: Bridge) -> None:
    # The endpoint queues a call as the agent made it; an MCP tool's ``server.tool`` is
    # ``server__tool`` on the wire (the agents' model APIs take no dot in a name).
    echo = ToolSpec("docs.echo", "1", "Echo", Args, input_schema={"type": "object"}, source="docs")
    bridge.submit("docs__echo", {"text": "hi"})
    proposer = AgentProposer(bridge.run_id, preset="mcp-client", tools=[echo], snapshot={}, bridge=bridge)
    assert proposer.propose(None) == {"tool": "docs.echo", "args": {"text": "hi"}}
