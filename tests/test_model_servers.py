"""The scripted model servers (tests/agents_support/model_servers.py) read by the providers'
own Python SDKs: Anthropic Messages and OpenAI Chat Completions streaming and not, OpenAI
Responses streaming; Gemini's shapes are read by the Gemini CLI itself in
tests/test_agent_clis.py. Each answer carries its usage, and each request is recorded."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

import anthropic
import openai

from tests.agents_support.model_servers import Text, ToolCall, model_server

# Any: the SDKs' TypedDicts are not what a test's literal is inferred as.
TOOLS_ANTHROPIC: Any = [
    {"name": "read_file", "description": "Read.", "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}}}
]
TOOLS_OPENAI: Any = [
    {"type": "function", "function": {"name": "read_file", "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}}}
]


def test_it_anthropic_messages_streaming_and_not() -> None:
    with model_server([ToolCall("read_file", {"path": "a.py"}), Text("done"), Text("again")]) as server:
        client = anthropic.Anthropic(base_url=server.base_url, api_key="run-token", max_retries=0)
        message = client.messages.create(model="m", max_tokens=100, messages=[{"role": "user", "content": "hi"}], tools=TOOLS_ANTHROPIC)
        assert message.stop_reason == "tool_use"
        use = message.content[0]
        assert use.type == "tool_use" and use.name == "read_file" and use.input == {"path": "a.py"}
        assert message.usage.input_tokens > 0 and message.usage.output_tokens > 0
        with client.messages.stream(
            model="m", max_tokens=100, messages=[{"role": "user", "content": "hi"}], tools=TOOLS_ANTHROPIC
        ) as stream:
            final = stream.get_final_message()
        assert final.content[0].type == "text" and final.content[0].text == "done"
        assert final.stop_reason == "end_turn" and final.usage.output_tokens > 0
        # No tools: a side request, answered without using the script.
        side = client.messages.create(model="m", max_tokens=1, messages=[{"role": "user", "content": "quota"}])
        assert side.content[0].type == "text" and side.content[0].text == server.side_text
        counted = client.messages.count_tokens(model="m", messages=[{"role": "user", "content": "hi"}])
        assert counted.input_tokens > 0
    assert [r.turn for r in server.requests] == [0, 1, None, None]
    # Claude Code sends x-api-key; this SDK (anthropic 2.x) sends the key as a bearer token.
    assert all(
        "run-token" in (r.headers.get("x-api-key"), r.headers.get("authorization", "").removeprefix("Bearer ")) for r in server.requests
    )
    assert server.requests[1].body["stream"] is True


def test_it_openai_chat_completions_streaming_and_not() -> None:
    with model_server([ToolCall("read_file", {"path": "b.py"}), Text("done")]) as server:
        client = openai.OpenAI(base_url=f"{server.base_url}/v1", api_key="run-token", max_retries=0)
        whole = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}], tools=TOOLS_OPENAI)
        calls = whole.choices[0].message.tool_calls or []
        call = calls[0]
        assert call.type == "function"
        assert call.function.name == "read_file" and json.loads(call.function.arguments) == {"path": "b.py"}
        assert whole.choices[0].finish_reason == "tool_calls" and whole.usage and whole.usage.prompt_tokens > 0
        chunks = list(
            client.chat.completions.create(
                model="m",
                messages=[{"role": "user", "content": "hi"}],
                tools=TOOLS_OPENAI,
                stream=True,
                stream_options={"include_usage": True},
            )
        )
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        assert text == "done"
        assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens > 0
    assert [r.turn for r in server.requests] == [0, 1]
    assert server.requests[0].headers["authorization"] == "Bearer run-token"


def test_it_openai_responses_streaming() -> None:
    tools: Any = [{"type": "function", "name": "read_file", "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}}]
    with model_server([ToolCall("read_file", {"path": "c.py"}), Text("done")]) as server:
        client = openai.OpenAI(base_url=f"{server.base_url}/v1", api_key="run-token", max_retries=0)
        with client.responses.stream(model="m", input="hi", tools=tools) as stream:
            first = stream.get_final_response()
        call = first.output[0]
        assert call.type == "function_call" and call.name == "read_file" and json.loads(call.arguments) == {"path": "c.py"}
        assert first.usage is not None and first.usage.input_tokens > 0
        second_input: Any = [
            {"type": "function_call", "call_id": call.call_id, "name": "read_file", "arguments": call.arguments},
            {"type": "function_call_output", "call_id": call.call_id, "output": "file text 5e2a"},
        ]
        with client.responses.stream(model="m", input=second_input, tools=tools) as stream:
            second = stream.get_final_response()
        assert second.output_text == "done"
    assert "file text 5e2a" in server.turn_requests()[1].text()


def test_it_gemini_shapes_and_unknown_paths() -> None:
    body = {"contents": [{"role": "user", "parts": [{"text": "hi"}]}], "tools": [{"functionDeclarations": [{"name": "read_file"}]}]}
    with model_server([ToolCall("read_file", {"path": "d.py"}), Text("done")], model="gemini-x") as server:

        def post(path: str, payload: object) -> bytes:
            request = urllib.request.Request(f"{server.base_url}{path}", json.dumps(payload).encode(), {"content-type": "application/json"})
            with urllib.request.urlopen(request, timeout=10) as answer:
                return bytes(answer.read())

        streamed = post("/v1beta/models/gemini-x:streamGenerateContent?alt=sse", body).decode()
        event = json.loads(streamed.split("data: ", 1)[1])
        assert event["candidates"][0]["content"]["parts"][0]["functionCall"] == {"name": "read_file", "args": {"path": "d.py"}}
        assert event["usageMetadata"]["promptTokenCount"] > 0
        whole = json.loads(post("/v1beta/models/gemini-x:generateContent", body))
        assert whole["candidates"][0]["content"]["parts"][0]["text"] == "done"
        assert json.loads(post("/v1beta/models/gemini-x:countTokens", body))["totalTokens"] > 0
        try:
            post("/elsewhere", {})
        except urllib.error.HTTPError as refused:
            assert refused.code == 404
    assert [r.path for r in server.unanswered()] == ["/elsewhere"]
    assert server.requests[0].query == {"alt": ["sse"]}
