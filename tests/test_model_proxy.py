"""The model proxy (gateway.model_proxy): an external agent's model traffic, sent with
its run's token to Harness under Daphne, reaches a provider on 127.0.0.1 with the
server's key and never the token, streamed as it comes, and each call is on the run's
record with its tokens and cost; a spent budget, a model the run did not choose and a
wrong or missing token are refused in the provider's own error shape, nothing
forwarded. The real SDKs (anthropic, openai) are the agents; Gemini is spoken over
plain HTTP, as its SDK is not installed."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx2
import openai
import pytest
from django.contrib.auth.models import User
from django.utils import timezone
from rest_framework.test import APIClient

from api.models import ApiToken
from core import events as ev
from gateway.model_wire import EventStream
from monitoring.overview import overview
from projects.models import AuditEntry, Project
from runs.agents import tokens
from runs.agents.usage import VIA, notes_of, totals
from runs.models import Run
from tests.agents_support.provider_doubles import INPUT_TOKENS, OUTPUT_TOKENS, ProviderDouble
from tests.fixtures_web import AsgiServer
from tests.helpers import STARTABLE, World

pytestmark = [pytest.mark.django_db(transaction=True)]

ANTHROPIC_KEY, OPENAI_KEY, GEMINI_KEY = "sk-ant-server-key-0123456789", "sk-openai-server-key-0123456789", "gemini-server-key-0123456789"
PRICES = {
    "claude-test": {"input": 3.0, "output": 15.0},
    "claude-dear": {"input": 15.0, "output": 75.0},
    "gpt-test": {"input": 1.25, "output": 10.0},
    "gemini-test": {"input": 0.3, "output": 2.5},
}
MODELS = ["claude-test", "gpt-test", "gemini-test"]


def cost(model: str) -> float:
    price = PRICES[model]
    return round((INPUT_TOKENS * price["input"] + OUTPUT_TOKENS * price["output"]) / 1_000_000, 8)


@pytest.fixture(scope="module")
def double() -> Iterator[ProviderDouble]:
    server = ProviderDouble()
    yield server
    server.close()


@pytest.fixture(scope="module")
def harness(
    double: ProviderDouble, django_db_setup: None, django_db_blocker: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[AsgiServer]:
    """Daphne serving the app, its providers the double, with the server's keys."""
    env = {
        "ANTHROPIC_BASE_URL": double.url,
        "ANTHROPIC_API_KEY": ANTHROPIC_KEY,
        "OPENAI_BASE_URL": f"{double.url}/v1",
        "OPENAI_API_KEY": OPENAI_KEY,
        "GEMINI_BASE_URL": double.url,
        "GEMINI_API_KEY": GEMINI_KEY,
        "HARNESS_MODEL_PRICES": json.dumps(PRICES),
    }
    with django_db_blocker.unblock():
        server = AsgiServer(tmp_path_factory.mktemp("daphne-proxy"), **env)
        server.start()
    yield server
    server.stop()


@pytest.fixture(autouse=True)
def fresh(double: ProviderDouble) -> None:
    double.seen.clear()
    double.hold.clear()
    double.release.clear()
    double.failing = None


def agent_run(**config: object) -> tuple[Run, str]:
    """A run whose proposer is an external agent, and its token."""
    run = World().create()
    Run.objects.filter(pk=run.pk).update(
        proposer={"kind": "agent", "agent": "claude-code", "model": "claude-test", "models": MODELS[1:], **config}
    )
    run.refresh_from_db()
    return run, tokens.mint(run)


def base(harness: AsgiServer, run: Run, provider: str) -> str:
    return f"{harness.url}/agent/runs/{run.pk}/{provider}"


def no_token_upstream(double: ProviderDouble, token: str) -> None:
    assert double.seen
    for seen in double.seen:
        assert token not in json.dumps(seen.headers) and token not in json.dumps(seen.query)
        assert token not in json.dumps(seen.body)


def usage_notes(run: Run) -> list[ev.ModelNote]:
    return [note for note in notes_of(run.pk) if note.kind == "usage"]


def check_recorded(run: Run, provider: str, api: str, model: str, stream: bool) -> None:
    [note] = usage_notes(run)
    detail = note.detail
    assert (detail["via"], detail["provider"], detail["api"], detail["model"], detail["stream"]) == (VIA, provider, api, model, stream)
    assert (detail["input_tokens"], detail["output_tokens"], detail["estimated"], detail["status"]) == (
        INPUT_TOKENS,
        OUTPUT_TOKENS,
        False,
        200,
    )
    assert detail["cost_usd"] == cost(model)
    assert detail["total_tokens"] == INPUT_TOKENS + OUTPUT_TOKENS and detail["request"] == 1
    assert isinstance(detail["duration_ms"], int)
    assert note.call_id is None


@pytest.mark.parametrize("stream", [False, True])
def test_it_forwards_anthropic_messages_with_the_servers_key_and_records_the_call(
    harness: AsgiServer, double: ProviderDouble, stream: bool
) -> None:
    run, token = agent_run()
    client = anthropic.Anthropic(api_key=token, base_url=base(harness, run, "anthropic"), max_retries=0)
    asked: dict[str, Any] = {"model": "claude-test", "max_tokens": 100, "messages": [{"role": "user", "content": "hi"}]}
    if stream:
        text = "".join(
            e.delta.text
            for e in client.messages.create(**asked, stream=True)
            if e.type == "content_block_delta" and e.delta.type == "text_delta"
        )
    else:
        reply = client.messages.create(**asked)
        text = reply.content[0].text if reply.content[0].type == "text" else ""
        assert reply.usage.input_tokens == INPUT_TOKENS
    assert text == "Hello world"
    [seen] = double.seen
    assert seen.path == "/v1/messages" and seen.headers["x-api-key"] == ANTHROPIC_KEY and "authorization" not in seen.headers
    assert seen.headers["anthropic-version"]  # the SDK's own headers pass
    no_token_upstream(double, token)
    check_recorded(run, "anthropic", "messages", "claude-test", stream)
    assert totals(run.pk).cost_usd == pytest.approx(cost("claude-test"))


def test_it_forwards_count_tokens_without_recording_a_model_call(harness: AsgiServer, double: ProviderDouble) -> None:
    run, token = agent_run()
    client = anthropic.Anthropic(api_key=token, base_url=base(harness, run, "anthropic"), max_retries=0)
    counted = client.messages.count_tokens(model="claude-test", messages=[{"role": "user", "content": "hi"}])
    assert counted.input_tokens == INPUT_TOKENS
    assert [s.path for s in double.seen] == ["/v1/messages/count_tokens"]
    assert usage_notes(run) == []


@pytest.mark.parametrize("stream", [False, True])
def test_it_forwards_openai_chat_completions_asking_a_stream_for_its_usage(
    harness: AsgiServer, double: ProviderDouble, stream: bool
) -> None:
    run, token = agent_run()
    client = openai.OpenAI(api_key=token, base_url=f"{base(harness, run, 'openai')}/v1", max_retries=0)
    messages: Any = [{"role": "user", "content": "hi"}]
    if stream:
        chunks = list(client.chat.completions.create(model="gpt-test", messages=messages, stream=True))
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    else:
        text = client.chat.completions.create(model="gpt-test", messages=messages).choices[0].message.content or ""
    assert text == "Hello world"
    [seen] = double.seen
    assert seen.path == "/v1/chat/completions" and seen.headers["authorization"] == f"Bearer {OPENAI_KEY}"
    assert seen.body.get("stream_options") == ({"include_usage": True} if stream else None)
    no_token_upstream(double, token)
    check_recorded(run, "openai", "chat_completions", "gpt-test", stream)


@pytest.mark.parametrize("stream", [False, True])
def test_it_forwards_openai_responses(harness: AsgiServer, double: ProviderDouble, stream: bool) -> None:
    run, token = agent_run()
    client = openai.OpenAI(api_key=token, base_url=f"{base(harness, run, 'openai')}/v1", max_retries=0)
    if stream:
        events = list(client.responses.create(model="gpt-test", input="hi", stream=True))
        text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
        assert events[-1].type == "response.completed"
    else:
        text = client.responses.create(model="gpt-test", input="hi").output_text
    assert text == "Hello world"
    [seen] = double.seen
    assert seen.path == "/v1/responses" and seen.headers["authorization"] == f"Bearer {OPENAI_KEY}"
    no_token_upstream(double, token)
    check_recorded(run, "openai", "responses", "gpt-test", stream)


@pytest.mark.parametrize("stream", [False, True])
def test_it_forwards_gemini_with_the_servers_key_in_place_of_the_agents(harness: AsgiServer, double: ProviderDouble, stream: bool) -> None:
    run, token = agent_run()
    body = {"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}
    if stream:
        url = f"{base(harness, run, 'gemini')}/v1beta/models/gemini-test:streamGenerateContent?alt=sse"
        answer = httpx2.post(url, json=body, headers={"x-goog-api-key": token}, timeout=30)
        chunks = [json.loads(line[6:]) for line in answer.text.splitlines() if line.startswith("data: ")]
        text = "".join(c["candidates"][0]["content"]["parts"][0]["text"] for c in chunks)
    else:
        url = f"{base(harness, run, 'gemini')}/v1beta/models/gemini-test:generateContent?key={token}"
        answer = httpx2.post(url, json=body, timeout=30)
        text = answer.json()["candidates"][0]["content"]["parts"][0]["text"]
    assert answer.status_code == 200 and text == "Hello world"
    [seen] = double.seen
    assert seen.path == "/v1beta/models/gemini-test:" + ("streamGenerateContent" if stream else "generateContent")
    assert seen.headers["x-goog-api-key"] == GEMINI_KEY and "key" not in seen.query
    assert seen.query.get("alt") == (["sse"] if stream else None)
    no_token_upstream(double, token)
    check_recorded(run, "gemini", "generate_content", "gemini-test", stream)


def test_it_passes_a_streams_bytes_on_as_they_come(harness: AsgiServer, double: ProviderDouble) -> None:
    run, token = agent_run()
    double.hold.set()  # the double sends message_start, then waits to be let go on
    ended = len(double.finished)
    url = f"{base(harness, run, 'anthropic')}/v1/messages"
    asked = {"model": "claude-test", "max_tokens": 100, "stream": True, "messages": [{"role": "user", "content": "hi"}]}
    with httpx2.stream("POST", url, json=asked, headers={"x-api-key": token, "anthropic-version": "2023-06-01"}, timeout=30) as answer:
        chunks = answer.iter_bytes()
        first = next(chunks)
        assert b"message_start" in first
        assert len(double.finished) == ended  # this stream has not ended upstream
        assert usage_notes(run) == []
        double.release.set()
        rest = b"".join(chunks)
    assert b"message_stop" in rest
    check_recorded(run, "anthropic", "messages", "claude-test", True)


def test_it_refuses_a_spent_run_budget_in_each_providers_shape_forwarding_nothing(harness: AsgiServer, double: ProviderDouble) -> None:
    run, token = agent_run(max_tokens=100)  # the first call (150 tokens) spends it
    claude = anthropic.Anthropic(api_key=token, base_url=base(harness, run, "anthropic"), max_retries=0)
    asked: dict[str, Any] = {"model": "claude-test", "max_tokens": 100, "messages": [{"role": "user", "content": "hi"}]}
    claude.messages.create(**asked)
    with pytest.raises(anthropic.BadRequestError) as refused:
        claude.messages.create(**asked)
    assert refused.value.status_code == 400
    assert refused.value.body == {
        "type": "error",
        "error": {"type": "invalid_request_error", "message": refused.value.body["error"]["message"]},  # type: ignore[index]
    }
    assert "token budget is spent: 150 of 100 tokens" in str(refused.value)
    # The openai SDK would retry a 429 twice; the answer says not to.
    gpt = openai.OpenAI(api_key=token, base_url=f"{base(harness, run, 'openai')}/v1", max_retries=2)
    with pytest.raises(openai.RateLimitError) as quota:
        gpt.chat.completions.create(model="gpt-test", messages=[{"role": "user", "content": "hi"}])
    assert quota.value.code == "insufficient_quota" and quota.value.type == "insufficient_quota"
    gemini = httpx2.post(
        f"{base(harness, run, 'gemini')}/v1beta/models/gemini-test:generateContent",
        json={"contents": []},
        headers={"x-goog-api-key": token},
    )
    assert gemini.status_code == 429 and gemini.json()["error"]["status"] == "RESOURCE_EXHAUSTED" and gemini.json()["error"]["code"] == 429
    assert len(double.seen) == 1  # the first call only
    refusals = [n for n in notes_of(run.pk) if n.kind == "budget_exhausted"]
    assert [(n.detail["provider"], n.detail["limit"], n.detail["by"]) for n in refusals] == [
        ("anthropic", "tokens", "the run's"),
        ("openai", "tokens", "the run's"),
        ("gemini", "tokens", "the run's"),
    ]


def test_it_refuses_once_the_budget_the_run_was_created_with_is_spent(harness: AsgiServer, double: ProviderDouble, operator: User) -> None:
    proposer = {"kind": "agent", "preset": "mcp-client", "model": "claude-test", "max_tokens": 200}
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {ApiToken.issue(operator)[1]}")
    created = client.post("/api/runs/", {"contract": STARTABLE, "proposer": proposer}, format="json")
    assert created.status_code == 201, created.json()
    run = Run.objects.get(pk=created.json()["id"])
    token = created.json()["agent_connection"]["token"]
    claude = anthropic.Anthropic(api_key=token, base_url=base(harness, run, "anthropic"), max_retries=0)
    asked: dict[str, Any] = {"model": "claude-test", "max_tokens": 100, "messages": [{"role": "user", "content": "hi"}]}
    claude.messages.create(**asked)  # 150 of its 200 tokens
    claude.messages.create(**asked)  # admitted with 50 left: the request in flight may cross it
    with pytest.raises(anthropic.BadRequestError, match="the run's token budget is spent: 300 of 200 tokens used over 2 model requests"):
        claude.messages.create(**asked)
    assert len(double.seen) == 2
    [refusal] = [n for n in notes_of(run.pk) if n.kind == "budget_exhausted"]
    assert (refusal.detail["limit"], refusal.detail["by"], refusal.detail["max_tokens"]) == ("tokens", "the run's", 200)


def test_it_refuses_when_the_projects_daily_budget_is_spent_naming_it(harness: AsgiServer, double: ProviderDouble) -> None:
    Project.objects.filter(slug="default").update(daily_max_cost_usd=0.0005)
    first, first_token = agent_run()
    second, second_token = agent_run()
    asked: dict[str, Any] = {"model": "claude-test", "max_tokens": 100, "messages": [{"role": "user", "content": "hi"}]}
    anthropic.Anthropic(api_key=first_token, base_url=base(harness, first, "anthropic"), max_retries=0).messages.create(**asked)
    assert cost("claude-test") > 0.0005  # the first run's call spent the project's day
    with pytest.raises(anthropic.BadRequestError, match="project default's daily budget"):
        anthropic.Anthropic(api_key=second_token, base_url=base(harness, second, "anthropic"), max_retries=0).messages.create(**asked)
    [refusal] = [n for n in notes_of(second.pk) if n.kind == "budget_exhausted"]
    assert refusal.detail["limit"] == "cost" and "daily budget" in str(refusal.detail["by"])
    assert len(double.seen) == 1


def test_it_refuses_a_model_the_run_did_not_choose_and_allows_its_dated_variant(harness: AsgiServer, double: ProviderDouble) -> None:
    run, token = agent_run()
    client = anthropic.Anthropic(api_key=token, base_url=base(harness, run, "anthropic"), max_retries=0)
    with pytest.raises(anthropic.PermissionDeniedError, match="'claude-dear' is not one this run may use"):
        client.messages.create(model="claude-dear", max_tokens=10, messages=[{"role": "user", "content": "hi"}])
    assert double.seen == []
    [refused] = [n for n in notes_of(run.pk) if n.kind == "refused"]
    assert refused.detail["model"] == "claude-dear" and refused.detail["allowed"] == MODELS
    client.messages.create(model="claude-test-20250929", max_tokens=10, messages=[{"role": "user", "content": "hi"}])
    assert [s.body["model"] for s in double.seen] == ["claude-test-20250929"]
    assert usage_notes(run)[0].detail["cost_usd"] == cost("claude-test")  # priced as its base model
    models = openai.OpenAI(api_key=token, base_url=f"{base(harness, run, 'openai')}/v1", max_retries=0).models.list()
    assert [m.id for m in models] == MODELS


def test_it_refuses_no_token_401_and_another_runs_404_audited_forwarding_nothing(harness: AsgiServer, double: ProviderDouble) -> None:
    run, token = agent_run()
    other, other_token = agent_run()
    asked: dict[str, Any] = {"model": "claude-test", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]}
    none = httpx2.post(f"{base(harness, run, 'anthropic')}/v1/messages", json=asked)
    assert none.status_code == 401 and none.headers["x-should-retry"] == "false"
    assert none.json() == {
        "type": "error",
        "error": {"type": "authentication_error", "message": "Harness model proxy: the run's token is required (no token)"},
    }
    with pytest.raises(anthropic.NotFoundError):
        anthropic.Anthropic(api_key=other_token, base_url=base(harness, run, "anthropic"), max_retries=0).messages.create(**asked)
    with pytest.raises(openai.AuthenticationError) as wrong:
        openai.OpenAI(api_key="harness-run-guess", base_url=f"{base(harness, run, 'openai')}/v1", max_retries=0).responses.create(
            model="gpt-test", input="x"
        )
    assert wrong.value.code == "invalid_api_key"
    gemini = httpx2.post(f"{base(harness, run, 'gemini')}/v1beta/models/gemini-test:generateContent", json={})
    assert gemini.status_code == 401 and gemini.json()["error"]["status"] == "UNAUTHENTICATED"
    Run.objects.filter(pk=run.pk).update(status=Run.Status.COMPLETE)
    with pytest.raises(anthropic.AuthenticationError, match="the run has ended"):
        anthropic.Anthropic(api_key=token, base_url=base(harness, run, "anthropic"), max_retries=0).messages.create(**asked)
    assert double.seen == []
    audited = list(AuditEntry.objects.filter(action="agent_token_refused").order_by("pk").values_list("detail", flat=True))
    assert [(d["where"], d["status"], d["reason"]) for d in audited] == [
        ("model proxy", 401, "no token"),
        ("model proxy", 404, f"a token of run {other.pk}"),
        ("model proxy", 401, "unknown token"),
        ("model proxy", 401, "no token"),
        ("model proxy", 401, "the run has ended (complete)"),
    ]
    assert all(token not in json.dumps(d) and other_token not in json.dumps(d) for d in audited)
    assert usage_notes(run) == [] and usage_notes(other) == []


def test_it_shows_the_calls_in_the_overview_and_counts_them_in_metrics(harness: AsgiServer, double: ProviderDouble) -> None:
    run, token = agent_run()
    client = openai.OpenAI(api_key=token, base_url=f"{base(harness, run, 'openai')}/v1", max_retries=0)
    client.responses.create(model="gpt-test", input="hi")
    costs = overview(Run.objects.all(), "24h", timezone.now()).costs
    assert sum(costs["gpt-test"]) == pytest.approx(cost("gpt-test"))
    with urllib.request.urlopen(f"{harness.url}/metrics", timeout=10) as answer:
        scraped = answer.read().decode()
    assert 'harness_model_proxy_requests_total{provider="openai",status="200"}' in scraped
    assert 'harness_model_requests_total{model="gpt-test",project="default"}' in scraped


def test_it_records_a_providers_failure_and_passes_its_answer_on(harness: AsgiServer, double: ProviderDouble) -> None:
    run, token = agent_run()
    double.failing = (529, {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}})
    client = anthropic.Anthropic(api_key=token, base_url=base(harness, run, "anthropic"), max_retries=0)
    with pytest.raises(anthropic.APIStatusError) as failed:
        client.messages.create(model="claude-test", max_tokens=10, messages=[{"role": "user", "content": "hi"}])
    assert failed.value.status_code == 529 and failed.value.body == double.failing[1]
    [note] = [n for n in notes_of(run.pk) if n.kind == "error"]
    assert (note.detail["status"], note.detail["message"], note.detail["model"]) == (529, "Overloaded", "claude-test")
    assert totals(run.pk).requests == 0


def test_it_reads_usage_from_events_split_anywhere_in_the_stream() -> None:
    events = [
        (
            "message_start",
            {"type": "message_start", "message": {"usage": {"input_tokens": 7, "cache_read_input_tokens": 100, "output_tokens": 1}}},
        ),
        ("ping", {"type": "ping"}),
        ("message_delta", {"type": "message_delta", "delta": {}, "usage": {"output_tokens": 42}}),
    ]
    raw = b"".join(f"event: {name}\r\ndata: {json.dumps(data)}\r\n\r\n".encode() for name, data in events)
    reader = EventStream("messages", "anthropic")
    for i in range(len(raw)):  # a byte at a time
        reader.feed(raw[i : i + 1])
    reader.close()
    assert (reader.usage.input_tokens, reader.usage.output_tokens) == (107, 42)
    responses = EventStream("responses", "openai")
    done = {"type": "response.completed", "response": {"usage": {"input_tokens": 5, "output_tokens": 6}}}
    responses.feed(b'event: response.created\ndata: {"type": "response.created", "response": {"usage": null}}\n\n')
    responses.feed(f"event: response.completed\ndata: {json.dumps(done)}\n\n".encode())
    assert (responses.usage.input_tokens, responses.usage.output_tokens) == (5, 6)
    gemini = EventStream("generate_content", "gemini")
    for n in (1, 9):
        gemini.feed(
            f"data: {json.dumps({'usageMetadata': {'promptTokenCount': 3, 'candidatesTokenCount': n, 'thoughtsTokenCount': 2}})}\n\n".encode()
        )
    assert (gemini.usage.input_tokens, gemini.usage.output_tokens) == (3, 11)
