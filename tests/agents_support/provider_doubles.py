"""A model provider on 127.0.0.1 for the model proxy's tests and benchmark: one stdlib
HTTP server that answers Anthropic Messages (and count_tokens), OpenAI Chat Completions
and Responses, and Gemini generateContent / streamGenerateContent (alt=sse), streamed
or not, with fixed usage numbers. It records every request (path, query, headers,
body) and can hold a stream after its first event until the test lets it go on."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

INPUT_TOKENS = 120
OUTPUT_TOKENS = 30
TEXT = ["Hel", "lo ", "world"]


@dataclass(frozen=True)
class Seen:
    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    body: dict[str, Any]


class ProviderDouble:
    """Every provider's API on one port: base URLs ``url`` (Anthropic, Gemini) and
    ``url + "/v1"`` (OpenAI)."""

    def __init__(self, input_tokens: int = INPUT_TOKENS, output_tokens: int = OUTPUT_TOKENS) -> None:
        self.input_tokens, self.output_tokens = input_tokens, output_tokens
        self.seen: list[Seen] = []
        self.hold = threading.Event()  # set: a stream waits after its first event...
        self.release = threading.Event()  # ...until this is set
        self.finished: list[float] = []  # when each stream's last byte was written (monotonic)
        self.failing: tuple[int, dict[str, Any]] | None = None  # set: every request is answered with this
        self._lock = threading.Lock()
        double = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            # The headers and the body are two writes: without TCP_NODELAY the body would
            # wait for the client's delayed acknowledgement of the headers (about 40 ms on
            # a kept-alive connection), which a provider's own servers do not make anyone wait.
            disable_nagle_algorithm = True

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                raw = self.rfile.read(length) if length else b""
                parts = urlsplit(self.path)
                body = json.loads(raw or b"{}")
                with double._lock:
                    double.seen.append(
                        Seen("POST", parts.path, parse_qs(parts.query), {k.lower(): v for k, v in self.headers.items()}, body)
                    )
                double._answer(self, parts.path, parse_qs(parts.query), body)

            def log_message(self, format: str, *args: Any) -> None:
                return

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = int(self.server.server_address[1])
        self.url = f"http://127.0.0.1:{self.port}"
        self._thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()

    def close(self) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()

    # -- answers --------------------------------------------------------------------

    def _answer(self, handler: BaseHTTPRequestHandler, path: str, query: dict[str, list[str]], body: dict[str, Any]) -> None:
        model = str(body.get("model", ""))
        if self.failing is not None:
            return _json(handler, self.failing[1], self.failing[0])
        if path == "/v1/messages/count_tokens":
            return _json(handler, {"input_tokens": self.input_tokens})
        if path == "/v1/messages":
            if body.get("stream"):
                return self._stream(handler, self._anthropic_events(model))
            return _json(handler, self._anthropic_message(model))
        if path == "/v1/chat/completions":
            if body.get("stream"):
                usage = bool((body.get("stream_options") or {}).get("include_usage"))
                return self._stream(handler, self._chat_chunks(model, usage))
            return _json(handler, self._chat(model))
        if path == "/v1/responses":
            if body.get("stream"):
                return self._stream(handler, self._response_events(model))
            return _json(handler, self._response(model, "".join(TEXT)))
        if path.startswith("/v1beta/models/"):
            model = path.split("/")[-1].split(":")[0]
            if path.endswith(":streamGenerateContent") and query.get("alt") == ["sse"]:
                return self._stream(handler, self._gemini_chunks())
            if path.endswith(":countTokens"):
                return _json(handler, {"totalTokens": self.input_tokens})
            return _json(handler, self._gemini(TEXT, last=True))
        return _json(handler, {"error": {"message": f"no such path {path}"}}, 404)

    def _stream(self, handler: BaseHTTPRequestHandler, events: Iterator[tuple[str, object]]) -> None:
        handler.send_response(200)
        handler.send_header("content-type", "text/event-stream")
        handler.send_header("cache-control", "no-cache")
        handler.send_header("connection", "close")
        handler.end_headers()
        for number, (name, data) in enumerate(events):
            text = data if isinstance(data, str) else json.dumps(data)
            handler.wfile.write((f"event: {name}\n" if name else "").encode() + f"data: {text}\n\n".encode())
            handler.wfile.flush()
            if number == 0 and self.hold.is_set():
                self.release.wait(30)
        with self._lock:
            self.finished.append(time.monotonic())
        handler.close_connection = True

    def _anthropic_message(self, model: str) -> dict[str, Any]:
        return {
            "id": "msg_double",
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": [{"type": "text", "text": "".join(TEXT)}],
            "stop_reason": "end_turn",
            "stop_sequence": None,
            "usage": {"input_tokens": self.input_tokens, "output_tokens": self.output_tokens},
        }

    def _anthropic_events(self, model: str) -> Iterator[tuple[str, object]]:
        start = {
            **self._anthropic_message(model),
            "content": [],
            "stop_reason": None,
            "usage": {"input_tokens": self.input_tokens, "output_tokens": 1},
        }
        yield "message_start", {"type": "message_start", "message": start}
        yield "content_block_start", {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}
        for piece in TEXT:
            yield "content_block_delta", {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": piece}}
        yield "content_block_stop", {"type": "content_block_stop", "index": 0}
        delta = {"stop_reason": "end_turn", "stop_sequence": None}
        yield "message_delta", {"type": "message_delta", "delta": delta, "usage": {"output_tokens": self.output_tokens}}
        yield "message_stop", {"type": "message_stop"}

    def _usage(self) -> dict[str, int]:
        return {
            "prompt_tokens": self.input_tokens,
            "completion_tokens": self.output_tokens,
            "total_tokens": self.input_tokens + self.output_tokens,
        }

    def _chat(self, model: str) -> dict[str, Any]:
        message = {"role": "assistant", "content": "".join(TEXT)}
        choice = {"index": 0, "message": message, "finish_reason": "stop", "logprobs": None}
        return {
            "id": "chatcmpl-double",
            "object": "chat.completion",
            "created": 0,
            "model": model,
            "choices": [choice],
            "usage": self._usage(),
        }

    def _chat_chunks(self, model: str, usage: bool) -> Iterator[tuple[str, object]]:
        head = {"id": "chatcmpl-double", "object": "chat.completion.chunk", "created": 0, "model": model}
        for piece in TEXT:
            yield "", {**head, "choices": [{"index": 0, "delta": {"content": piece}, "finish_reason": None}]}
        yield "", {**head, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}
        if usage:
            yield "", {**head, "choices": [], "usage": self._usage()}
        yield "", "[DONE]"

    def _response(self, model: str, text: str, status: str = "completed") -> dict[str, Any]:
        content = [{"type": "output_text", "text": text, "annotations": []}]
        item = {"type": "message", "id": "msg_double", "status": "completed", "role": "assistant", "content": content}
        usage = {
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "total_tokens": self.input_tokens + self.output_tokens,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens_details": {"reasoning_tokens": 0},
        }
        return {
            "id": "resp_double",
            "object": "response",
            "created_at": 0,
            "model": model,
            "status": status,
            "output": [item] if text else [],
            "usage": usage if status == "completed" else None,
            "parallel_tool_calls": True,
            "tool_choice": "auto",
            "tools": [],
        }

    def _response_events(self, model: str) -> Iterator[tuple[str, object]]:
        yield "response.created", {"type": "response.created", "sequence_number": 0, "response": self._response(model, "", "in_progress")}
        for n, piece in enumerate(TEXT, start=1):
            delta = {
                "type": "response.output_text.delta",
                "sequence_number": n,
                "item_id": "msg_double",
                "output_index": 0,
                "content_index": 0,
                "delta": piece,
                "logprobs": [],
            }
            yield "response.output_text.delta", delta
        done = {"type": "response.completed", "sequence_number": len(TEXT) + 1, "response": self._response(model, "".join(TEXT))}
        yield "response.completed", done

    def _gemini(self, pieces: list[str], last: bool) -> dict[str, Any]:
        candidate = {"content": {"role": "model", "parts": [{"text": "".join(pieces)}]}, "index": 0}
        if last:
            candidate["finishReason"] = "STOP"
        meta = {"promptTokenCount": self.input_tokens, "candidatesTokenCount": self.output_tokens if last else 1}
        return {"candidates": [candidate], "usageMetadata": {**meta, "totalTokenCount": sum(meta.values())}}

    def _gemini_chunks(self) -> Iterator[tuple[str, object]]:
        for n, piece in enumerate(TEXT):
            yield "", self._gemini([piece], last=n == len(TEXT) - 1)


def _json(handler: BaseHTTPRequestHandler, body: object, status: int = 200) -> None:
    data = json.dumps(body).encode()
    handler.send_response(status)
    handler.send_header("content-type", "application/json")
    handler.send_header("content-length", str(len(data)))
    handler.end_headers()
    handler.wfile.write(data)
