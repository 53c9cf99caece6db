"""Scripted model servers on 127.0.0.1 for the agent CLIs' tests (tests/test_agent_clis.py):
one server speaks each provider's API the CLIs use (docs/agents-protocols.md), and the
model's turns are a script the test writes.

- Anthropic Messages: ``POST /v1/messages`` (SSE when ``"stream": true``, else one JSON
  message), ``POST /v1/messages/count_tokens``.
- OpenAI Responses: ``POST /v1/responses`` (SSE).
- OpenAI Chat Completions: ``POST /v1/chat/completions`` (SSE when ``"stream": true``).
- Gemini: ``POST /v1beta/models/<model>:generateContent``, ``:streamGenerateContent``
  (``?alt=sse``), ``:countTokens``.
- ``GET /v1/models`` and ``GET /v1beta/models`` (lists with the scripted model's name).

A *turn request* is a request for the conversation's next turn: one that offers the model
tools. Each takes the script's next turn (a tool call or the final text); once the script
is spent, it answers :data:`SPENT`. A request that offers no tools is a side request of
the CLI (a title, a quota probe, a check on who speaks next) and is answered with
:attr:`ModelServer.side_text` without using the script. Every request is recorded
(method, path, query, headers, JSON body), answered or not, so a test can assert what
reached the model; each answer has its usage (input and output tokens) as the provider
reports it, so a proxy in between can count them.

Several agents at once (a trial's runs: tests/test_trial_agents.py): ``per_model_server``
gives each model its own script, and each conversation takes its turns from its own
history (the model's turns it already holds), so runs sharing the server never take each
other's turns. Each answered generation's usage is kept by model (``answered``), which a
test counts against what the model proxy recorded.

Standard library only: a threaded ``http.server`` on a free port, stopped by the
context manager.
"""

from __future__ import annotations

import gzip
import itertools
import json
import threading
import time
import zlib
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

SPENT = "(the scripted model has no more turns)"


@dataclass(frozen=True)
class ToolCall:
    """The model calls ``name`` with ``args`` (the name as the CLI offered it, or any other)."""

    name: str
    args: Mapping[str, Any]


@dataclass(frozen=True)
class Text:
    """The model answers ``text`` and ends its turn."""

    text: str


Turn = ToolCall | Text


@dataclass(frozen=True)
class Recorded:
    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]  # names in lower case
    body: Any  # the JSON body, or None
    turn: int | None  # the script's turn it took (0-based), None for a side request

    def text(self) -> str:
        """The body as one JSON string, for a test's ``in`` checks."""
        return json.dumps(self.body)

    def tool_names(self) -> list[str]:
        """The names of the tools the request offers, whatever the provider's shape."""
        return offered_tools(self.body)


def offered_tools(body: Any) -> list[str]:
    if not isinstance(body, dict):
        return []
    names: list[str] = []
    for tool in body.get("tools") or []:
        if not isinstance(tool, dict):
            continue
        if "functionDeclarations" in tool:  # Gemini
            names += [str(f.get("name")) for f in tool["functionDeclarations"] or []]
        elif isinstance(tool.get("function"), dict):  # Chat Completions
            names.append(str(tool["function"].get("name")))
        elif tool.get("type") == "namespace":  # Responses: a namespace of functions (Codex's MCP servers)
            names += [f"{tool.get('name')}__{t.get('name')}" for t in tool.get("tools") or []]
        elif "name" in tool:  # Anthropic, Responses
            names.append(str(tool["name"]))
        else:
            names.append(str(tool.get("type")))
    return names


def _namespaced(body: Any, name: str) -> dict[str, str]:
    """A Responses function call's name: ``{"namespace": ns, "name": tool}`` when the request
    offers ``tool`` in the namespace ``ns`` and ``name`` is ``<ns>__<tool>``, else ``{"name": name}``."""
    for tool in body.get("tools") or [] if isinstance(body, dict) else []:
        if isinstance(tool, dict) and tool.get("type") == "namespace":
            for inner in tool.get("tools") or []:
                if name == f"{tool.get('name')}__{inner.get('name')}":
                    return {"namespace": str(tool["name"]), "name": str(inner["name"])}
    return {"name": name}


def conversation_turns(body: Any) -> int:
    """How many turns of the model's a request's conversation already holds, whatever
    the provider's shape: the next turn of a per-conversation script is this one."""
    if not isinstance(body, dict):
        return 0
    items = body.get("messages") or body.get("contents") or body.get("input")
    if not isinstance(items, list):
        return 0
    turns = 0
    for item in items:
        if not isinstance(item, dict):
            continue
        if item.get("role") in ("assistant", "model") and item.get("type", "message") == "message":
            turns += 1  # Anthropic, Chat Completions, Gemini; a Responses assistant message
        elif item.get("type") == "function_call":
            turns += 1  # a Responses function call (one per scripted turn)
    return turns


def _tokens(body: Any) -> int:
    """A stable stand-in for the prompt's token count: its JSON length / 4."""
    return max(1, len(json.dumps(body)) // 4)


def _sse(events: Sequence[tuple[str | None, Any]]) -> bytes:
    out = []
    for name, data in events:
        payload = data if isinstance(data, str) else json.dumps(data)
        out.append((f"event: {name}\n" if name else "") + f"data: {payload}\n\n")
    return "".join(out).encode()


@dataclass
class ModelServer:
    script: Sequence[Turn]
    model: str = "scripted-model"
    side_text: str = "ok"
    requests: list[Recorded] = field(default_factory=list)
    port: int = 0
    # Set: a script per model (a model name, or its prefix), each conversation taking
    # its turns from its own history (conversation_turns) instead of one shared script.
    scripts: Mapping[str, Sequence[Turn]] | None = None
    # (model, input tokens, output tokens) of each generation answered, in order.
    answered: list[tuple[str, int, int]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self._next = 0
        self._ids = itertools.count(1)

    # What tests read

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def turn_requests(self) -> list[Recorded]:
        with self._lock:
            return [r for r in self.requests if r.turn is not None]

    def unanswered(self) -> list[Recorded]:
        """Requests to a path this server does not know (answered 404)."""
        with self._lock:
            return [r for r in self.requests if isinstance(r.body, dict) and r.body.get("__unknown__") is True]

    # Taking turns

    def _take(self, body: Any, model: str = "") -> tuple[int | None, Turn]:
        with self._lock:
            if not offered_tools(body):
                return None, Text(self.side_text)
            if self.scripts is not None:
                script = self.script_of(model or str(body.get("model", "")))
                index = conversation_turns(body)
            else:
                script, index = self.script, self._next
                self._next += 1
            turn = script[index] if index < len(script) else Text(SPENT)
            return index, turn

    def script_of(self, model: str) -> Sequence[Turn]:
        assert self.scripts is not None
        for name, script in self.scripts.items():
            if model == name or model.startswith(name + "-"):
                return script
        return [Text(f"(no script for the model {model!r})")]

    def _answered(self, model: str, usage_in: int, usage_out: int) -> None:
        with self._lock:
            self.answered.append((model, usage_in, usage_out))

    def tokens_of(self, model: str) -> tuple[int, int]:
        """Input and output tokens the server answered for ``model`` (and its dated variants)."""
        with self._lock:
            mine = [(i, o) for m, i, o in self.answered if m == model or m.startswith(model + "-")]
        return sum(i for i, _ in mine), sum(o for _, o in mine)

    def new_id(self, prefix: str) -> str:
        return f"{prefix}_{next(self._ids):04d}"

    def record(self, request: Recorded) -> None:
        with self._lock:
            self.requests.append(request)

    # Anthropic Messages

    def anthropic(self, body: Any) -> tuple[int | None, int, str, bytes]:
        index, turn = self._take(body)
        usage_in = _tokens(body)
        message_id = self.new_id("msg")
        if isinstance(turn, ToolCall):
            block: dict[str, Any] = {"type": "tool_use", "id": self.new_id("toolu"), "name": turn.name, "input": dict(turn.args)}
            stop = "tool_use"
        else:
            block = {"type": "text", "text": turn.text}
            stop = "end_turn"
        usage_out = max(1, len(json.dumps(block)) // 4)
        self._answered(str(body.get("model", self.model)), usage_in, usage_out)
        usage = {"input_tokens": usage_in, "output_tokens": usage_out, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}
        message = {
            "id": message_id,
            "type": "message",
            "role": "assistant",
            "model": body.get("model", self.model),
            "content": [block],
            "stop_reason": stop,
            "stop_sequence": None,
            "usage": usage,
        }
        if not body.get("stream"):
            return index, 200, "application/json", json.dumps(message).encode()
        start = {**message, "content": [], "stop_reason": None, "usage": {**usage, "output_tokens": 1}}
        events: list[tuple[str | None, Any]] = [("message_start", {"type": "message_start", "message": start})]
        if block["type"] == "tool_use":
            events.append(("content_block_start", {"type": "content_block_start", "index": 0, "content_block": {**block, "input": {}}}))
            events.append(
                (
                    "content_block_delta",
                    {
                        "type": "content_block_delta",
                        "index": 0,
                        "delta": {"type": "input_json_delta", "partial_json": json.dumps(block["input"])},
                    },
                )
            )
        else:
            events.append(
                ("content_block_start", {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}})
            )
            events.append(
                ("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": block["text"]}})
            )
        events.append(("content_block_stop", {"type": "content_block_stop", "index": 0}))
        events.append(
            (
                "message_delta",
                {"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": None}, "usage": {"output_tokens": usage_out}},
            )
        )
        events.append(("message_stop", {"type": "message_stop"}))
        return index, 200, "text/event-stream", _sse(events)

    # OpenAI Responses (streaming)

    def responses(self, body: Any) -> tuple[int | None, int, str, bytes]:
        index, turn = self._take(body)
        response_id = self.new_id("resp")
        if isinstance(turn, ToolCall):
            item: dict[str, Any] = {
                "type": "function_call",
                "id": self.new_id("fc"),
                "call_id": self.new_id("call"),
                **_namespaced(body, turn.name),
                "arguments": json.dumps(dict(turn.args)),
                "status": "completed",
            }
        else:
            item = {
                "type": "message",
                "id": self.new_id("msg"),
                "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": turn.text, "annotations": []}],
            }
        usage_in = _tokens(body)
        usage_out = max(1, len(json.dumps(item)) // 4)
        self._answered(str(body.get("model", self.model)), usage_in, usage_out)
        usage = {
            "input_tokens": usage_in,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": usage_out,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": usage_in + usage_out,
        }
        base = {"id": response_id, "object": "response", "created_at": int(time.time()), "model": body.get("model", self.model)}
        if not body.get("stream", True):
            return index, 200, "application/json", json.dumps({**base, "status": "completed", "output": [item], "usage": usage}).encode()
        seq = itertools.count()
        events: list[tuple[str | None, Any]] = [
            (
                "response.created",
                {"type": "response.created", "sequence_number": next(seq), "response": {**base, "status": "in_progress", "output": []}},
            ),
        ]
        if item["type"] == "function_call":
            added = {**item, "arguments": "", "status": "in_progress"}
            events.append(
                (
                    "response.output_item.added",
                    {"type": "response.output_item.added", "sequence_number": next(seq), "output_index": 0, "item": added},
                )
            )
            events.append(
                (
                    "response.function_call_arguments.delta",
                    {
                        "type": "response.function_call_arguments.delta",
                        "sequence_number": next(seq),
                        "item_id": item["id"],
                        "output_index": 0,
                        "delta": item["arguments"],
                    },
                )
            )
            events.append(
                (
                    "response.function_call_arguments.done",
                    {
                        "type": "response.function_call_arguments.done",
                        "sequence_number": next(seq),
                        "item_id": item["id"],
                        "output_index": 0,
                        "arguments": item["arguments"],
                    },
                )
            )
        else:
            text = item["content"][0]["text"]
            added = {**item, "status": "in_progress", "content": []}
            part = {"type": "output_text", "text": "", "annotations": []}
            common = {"item_id": item["id"], "output_index": 0, "content_index": 0}
            events += [
                (
                    "response.output_item.added",
                    {"type": "response.output_item.added", "sequence_number": next(seq), "output_index": 0, "item": added},
                ),
                (
                    "response.content_part.added",
                    {"type": "response.content_part.added", "sequence_number": next(seq), **common, "part": part},
                ),
                (
                    "response.output_text.delta",
                    {"type": "response.output_text.delta", "sequence_number": next(seq), **common, "delta": text},
                ),
                ("response.output_text.done", {"type": "response.output_text.done", "sequence_number": next(seq), **common, "text": text}),
                (
                    "response.content_part.done",
                    {"type": "response.content_part.done", "sequence_number": next(seq), **common, "part": {**part, "text": text}},
                ),
            ]
        events.append(
            (
                "response.output_item.done",
                {"type": "response.output_item.done", "sequence_number": next(seq), "output_index": 0, "item": item},
            )
        )
        completed = {**base, "status": "completed", "output": [item], "usage": usage}
        events.append(("response.completed", {"type": "response.completed", "sequence_number": next(seq), "response": completed}))
        return index, 200, "text/event-stream", _sse(events)

    # OpenAI Chat Completions

    def chat(self, body: Any) -> tuple[int | None, int, str, bytes]:
        index, turn = self._take(body)
        chat_id = self.new_id("chatcmpl")
        model = body.get("model", self.model)
        usage_in = _tokens(body)
        message: dict[str, Any]
        if isinstance(turn, ToolCall):
            call = {
                "id": self.new_id("call"),
                "type": "function",
                "function": {"name": turn.name, "arguments": json.dumps(dict(turn.args))},
            }
            message = {"role": "assistant", "content": None, "tool_calls": [call]}
            finish = "tool_calls"
        else:
            message = {"role": "assistant", "content": turn.text}
            finish = "stop"
        usage_out = max(1, len(json.dumps(message)) // 4)
        self._answered(str(model), usage_in, usage_out)
        usage = {"prompt_tokens": usage_in, "completion_tokens": usage_out, "total_tokens": usage_in + usage_out}
        base = {"id": chat_id, "created": int(time.time()), "model": model}
        if not body.get("stream"):
            whole = {
                **base,
                "object": "chat.completion",
                "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                "usage": usage,
            }
            return index, 200, "application/json", json.dumps(whole).encode()
        chunk = {**base, "object": "chat.completion.chunk"}
        if "tool_calls" in message:
            delta: dict[str, Any] = {"role": "assistant", "content": None, "tool_calls": [{"index": 0, **message["tool_calls"][0]}]}
        else:
            delta = {"role": "assistant", "content": message["content"]}
        events: list[tuple[str | None, Any]] = [
            (None, {**chunk, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]}),
            (None, {**chunk, "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]}),
            (None, {**chunk, "choices": [], "usage": usage}),
            (None, "[DONE]"),
        ]
        return index, 200, "text/event-stream", _sse(events)

    # Gemini generateContent

    def gemini(self, body: Any, stream: bool, model: str = "") -> tuple[int | None, int, str, bytes]:
        index, turn = self._take(body, model)
        if isinstance(turn, ToolCall):
            part: dict[str, Any] = {"functionCall": {"name": turn.name, "args": dict(turn.args)}}
        else:
            part = {"text": turn.text}
        usage_in = _tokens(body)
        usage_out = max(1, len(json.dumps(part)) // 4)
        self._answered(model or self.model, usage_in, usage_out)
        answer = {
            "candidates": [{"content": {"role": "model", "parts": [part]}, "finishReason": "STOP", "index": 0}],
            "usageMetadata": {"promptTokenCount": usage_in, "candidatesTokenCount": usage_out, "totalTokenCount": usage_in + usage_out},
            "modelVersion": self.model,
            "responseId": self.new_id("gen"),
        }
        if stream:
            return index, 200, "text/event-stream", _sse([(None, answer)])
        return index, 200, "application/json", json.dumps(answer).encode()

    def models(self) -> bytes:
        return json.dumps(
            {
                "object": "list",
                "data": [
                    {"id": self.model, "object": "model", "created": 0, "owned_by": "scripted", "type": "model", "display_name": self.model}
                ],
                "models": [
                    {
                        "name": f"models/{self.model}",
                        "displayName": self.model,
                        "supportedGenerationMethods": ["generateContent", "countTokens"],
                    }
                ],
                "has_more": False,
            }
        ).encode()


def _read_body(handler: BaseHTTPRequestHandler) -> bytes:
    if handler.headers.get("transfer-encoding", "").lower() == "chunked":
        chunks = []
        while True:
            size = int(handler.rfile.readline().split(b";")[0].strip() or b"0", 16)
            if size == 0:
                handler.rfile.readline()
                break
            chunks.append(handler.rfile.read(size))
            handler.rfile.readline()
        raw = b"".join(chunks)
    else:
        raw = handler.rfile.read(int(handler.headers.get("content-length") or 0))
    encoding = handler.headers.get("content-encoding", "").lower()
    if encoding == "gzip":
        raw = gzip.decompress(raw)
    elif encoding == "deflate":
        raw = zlib.decompress(raw)
    return raw


def _gemini_model(path: str) -> str:
    """``/v1beta/models/gemini-2.5-pro:generateContent`` names its model in the path."""
    return path.rsplit("/", 1)[-1].split(":", 1)[0]


def _handler(server: ModelServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def _answer(self, status: int, content_type: str, payload: bytes) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(payload)))
            if content_type == "text/event-stream":
                self.send_header("Cache-Control", "no-cache")
            self.end_headers()
            self.wfile.write(payload)

        def _serve(self) -> None:
            raw = _read_body(self)
            try:
                body: Any = json.loads(raw) if raw else None
            except ValueError:
                body = {"__raw__": raw.decode(errors="replace")}
            parts = urlsplit(self.path)
            path = parts.path
            query = parse_qs(parts.query)
            headers = {k.lower(): v for k, v in self.headers.items()}
            turn: int | None = None
            if self.command == "POST" and path.endswith("/messages/count_tokens"):
                status, kind, payload = 200, "application/json", json.dumps({"input_tokens": _tokens(body)}).encode()
            elif self.command == "POST" and path.endswith("/messages"):
                turn, status, kind, payload = server.anthropic(body)
            elif self.command == "POST" and path.endswith("/responses"):
                turn, status, kind, payload = server.responses(body)
            elif self.command == "POST" and path.endswith("/chat/completions"):
                turn, status, kind, payload = server.chat(body)
            elif self.command == "POST" and path.endswith(":countTokens"):
                status, kind, payload = 200, "application/json", json.dumps({"totalTokens": _tokens(body)}).encode()
            elif self.command == "POST" and path.endswith(":streamGenerateContent"):
                turn, status, kind, payload = server.gemini(body, stream=True, model=_gemini_model(path))
            elif self.command == "POST" and path.endswith(":generateContent"):
                turn, status, kind, payload = server.gemini(body, stream=False, model=_gemini_model(path))
            elif self.command in ("GET", "HEAD") and path.rstrip("/").endswith("/models"):
                status, kind, payload = 200, "application/json", server.models()
            else:
                status, kind = 404, "application/json"
                payload = json.dumps({"error": {"type": "not_found_error", "message": f"{self.command} {path} is not scripted"}}).encode()
                server.record(Recorded(self.command, path, query, headers, {"__unknown__": True, "body": body}, None))
                self._answer(status, kind, payload)
                return
            server.record(Recorded(self.command, path, query, headers, body, turn))
            self._answer(status, kind, b"" if self.command == "HEAD" else payload)

        do_GET = do_POST = do_PUT = do_DELETE = do_HEAD = _serve

    return Handler


@contextmanager
def model_server(script: Sequence[Turn], model: str = "scripted-model") -> Iterator[ModelServer]:
    with _serving(ModelServer(script, model)) as server:
        yield server


@contextmanager
def per_model_server(scripts: Mapping[str, Sequence[Turn]]) -> Iterator[ModelServer]:
    """A server where each model has its own script and each conversation its own turns
    (several agents' runs at once, each CLI naming its own model)."""
    with _serving(ModelServer([], scripts=dict(scripts))) as server:
        yield server


@contextmanager
def _serving(server: ModelServer) -> Iterator[ModelServer]:
    http = ThreadingHTTPServer(("127.0.0.1", 0), _handler(server))
    http.daemon_threads = True
    server.port = http.server_address[1]
    thread = threading.Thread(target=http.serve_forever, name="model-server", daemon=True)
    thread.start()
    try:
        yield server
    finally:
        http.shutdown()
        http.server_close()
        thread.join(10)
