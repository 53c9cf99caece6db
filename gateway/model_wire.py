"""The providers' wire formats as the model proxy (gateway.model_proxy) needs them:
which requests it serves, where the agent's credential is, the provider's own error
shape, and the usage numbers in an answer (JSON, or server-sent events read on the side
as they pass through). Plain functions on bytes and dicts, no I/O."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Literal
from urllib.parse import parse_qsl, urlencode

Provider = Literal["anthropic", "openai", "gemini"]
PROVIDERS: tuple[Provider, ...] = ("anthropic", "openai", "gemini")
# What a refusal is: the token (auth: none or unknown; not_found: another run's), the
# request (bad_request, too_large, not_served), the model, the budget, the server's own
# configuration (no_key) or the provider (upstream).
Refusal = Literal["auth", "not_found", "bad_request", "too_large", "not_served", "model", "budget", "no_key", "upstream"]

# The largest event (or non-streamed answer) read for its usage numbers; a larger one
# still passes through whole, unread (Responses' response.completed repeats the whole
# answer, so this is generous).
PARSE_LIMIT = 16 * 1024 * 1024


@dataclass(frozen=True)
class Route:
    """A request the proxy serves: ``api`` names it in the record; ``model`` is the one
    the path names (Gemini), else the body's; ``usage`` says whether it is a model call
    that costs (count_tokens is not); ``listing`` is answered by the proxy itself."""

    api: str
    upstream_path: str
    model: str | None = None
    usage: bool = True
    listing: bool = False
    stream_in_path: bool = False


_GEMINI = re.compile(r"^/(?P<version>v1|v1beta|v1alpha)/models/(?P<model>[A-Za-z0-9._-]{1,200}):(?P<method>[A-Za-z]+)$")
_GEMINI_METHODS = {"generateContent": "generate_content", "streamGenerateContent": "generate_content", "countTokens": "count_tokens"}


def route(provider: Provider, method: str, rest: str) -> Route | None:
    """What ``method rest`` (the path after /agent/runs/<id>/<provider>) is, or None."""
    if provider == "anthropic":
        match method, rest:
            case "POST", "/v1/messages":
                return Route("messages", rest)
            case "POST", "/v1/messages/count_tokens":
                return Route("count_tokens", rest, usage=False)
            case "GET", "/v1/models":
                return Route("models", rest, usage=False, listing=True)
        return None
    if provider == "openai":
        # The agent's base URL may end in /v1 or not; the provider's (OPENAI_BASE_URL) does.
        path = rest[3:] if rest.startswith("/v1/") else rest
        match method, path:
            case "POST", "/chat/completions":
                return Route("chat_completions", path)
            case "POST", "/responses":
                return Route("responses", path)
            case "GET", "/models":
                return Route("models", path, usage=False, listing=True)
        return None
    if method == "GET" and rest in ("/v1beta/models", "/v1/models"):
        return Route("models", rest, usage=False, listing=True)
    found = _GEMINI.match(rest)
    if method != "POST" or found is None or found["method"] not in _GEMINI_METHODS:
        return None
    api = _GEMINI_METHODS[found["method"]]
    return Route(api, rest, model=found["model"], usage=api != "count_tokens", stream_in_path=found["method"] == "streamGenerateContent")


def header(headers: list[tuple[bytes, bytes]], name: bytes) -> str | None:
    for key, value in headers:
        if key.lower() == name:
            return value.decode("latin-1")
    return None


def token_of(headers: list[tuple[bytes, bytes]], query: bytes) -> str | None:
    """The credential the agent shows, wherever its SDK puts it: ``x-api-key``
    (Anthropic), ``Authorization: Bearer`` (OpenAI, and Anthropic's other form),
    ``x-goog-api-key`` or ``?key=`` (Gemini)."""
    for name in (b"x-api-key", b"x-goog-api-key"):
        value = header(headers, name)
        if value:
            return value.strip()
    authorization = header(headers, b"authorization")
    if authorization and authorization[:7].lower() == "bearer ":
        return authorization[7:].strip() or None
    for key, value in parse_qsl(query.decode("latin-1")):
        if key == "key" and value:
            return value
    return None


def without_key(query: bytes) -> str:
    """The query string without the agent's ``key`` (the server's goes in a header)."""
    return urlencode([(k, v) for k, v in parse_qsl(query.decode("latin-1"), keep_blank_values=True) if k != "key"])


def auth_headers(provider: Provider, key: str) -> dict[str, str]:
    if provider == "anthropic":
        return {"x-api-key": key}
    if provider == "openai":
        return {"authorization": f"Bearer {key}"}
    return {"x-goog-api-key": key}


_ANTHROPIC = {
    "auth": (401, "authentication_error"),
    "not_found": (404, "not_found_error"),
    "bad_request": (400, "invalid_request_error"),
    "too_large": (413, "request_too_large"),
    "not_served": (404, "not_found_error"),
    "model": (403, "permission_error"),
    # As Anthropic answers a spent spend limit: 400, not a rate limit a client would retry.
    "budget": (400, "invalid_request_error"),
    "no_key": (503, "api_error"),
    "upstream": (502, "api_error"),
}
_OPENAI = {
    "auth": (401, "invalid_request_error", "invalid_api_key"),
    "not_found": (404, "invalid_request_error", "not_found"),
    "bad_request": (400, "invalid_request_error", None),
    "too_large": (413, "invalid_request_error", "request_too_large"),
    "not_served": (404, "invalid_request_error", "unknown_url"),
    "model": (403, "invalid_request_error", "model_not_allowed"),
    "budget": (429, "insufficient_quota", "insufficient_quota"),
    "no_key": (503, "server_error", None),
    "upstream": (502, "server_error", None),
}
_GOOGLE = {
    "auth": (401, "UNAUTHENTICATED"),
    "not_found": (404, "NOT_FOUND"),
    "bad_request": (400, "INVALID_ARGUMENT"),
    "too_large": (413, "INVALID_ARGUMENT"),
    "not_served": (404, "NOT_FOUND"),
    "model": (403, "PERMISSION_DENIED"),
    "budget": (429, "RESOURCE_EXHAUSTED"),
    "no_key": (503, "UNAVAILABLE"),
    "upstream": (502, "UNAVAILABLE"),
}


def error(provider: Provider, refusal: Refusal, message: str) -> tuple[int, dict[str, Any]]:
    """The status and body the provider itself would answer a refusal of this kind with,
    so the agent's SDK raises its own error type with Harness's message."""
    message = f"Harness model proxy: {message}"
    if provider == "anthropic":
        status, kind = _ANTHROPIC[refusal]
        return status, {"type": "error", "error": {"type": kind, "message": message}}
    if provider == "openai":
        status, kind, code = _OPENAI[refusal]
        param = "model" if refusal == "model" else None
        return status, {"error": {"message": message, "type": kind, "param": param, "code": code}}
    status, google = _GOOGLE[refusal]
    return status, {"error": {"code": status, "message": message, "status": google}}


def listing(provider: Provider, models: tuple[str, ...]) -> dict[str, Any]:
    """The run's allowed models in the provider's list shape (GET .../models)."""
    if provider == "anthropic":
        data = [{"type": "model", "id": m, "display_name": m, "created_at": "1970-01-01T00:00:00Z"} for m in models]
        return {"data": data, "has_more": False, "first_id": models[0] if models else None, "last_id": models[-1] if models else None}
    if provider == "openai":
        return {"object": "list", "data": [{"id": m, "object": "model", "created": 0, "owned_by": "harness"} for m in models]}
    return {
        "models": [
            {"name": f"models/{m}", "displayName": m, "supportedGenerationMethods": ["generateContent", "countTokens"]} for m in models
        ]
    }


@dataclass
class Usage:
    """The usage numbers read so far; None where the answer has not said."""

    input_tokens: int | None = None
    output_tokens: int | None = None


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def _add(*values: object) -> int | None:
    numbers = [n for n in (_int(v) for v in values) if n is not None]
    return sum(numbers) if numbers else None


def read_usage(api: str, provider: Provider, body: object, usage: Usage, event: str = "") -> None:
    """Update ``usage`` from one answer (a JSON body) or one streamed event's data."""
    if not isinstance(body, dict):
        if isinstance(body, list) and body:  # Gemini's streamed JSON array: the last chunk's totals
            read_usage(api, provider, body[-1], usage, event)
        return
    if provider == "gemini":
        meta = body.get("usageMetadata")
        if isinstance(meta, dict):
            usage.input_tokens = _add(meta.get("promptTokenCount"), meta.get("toolUsePromptTokenCount"))
            usage.output_tokens = _add(meta.get("candidatesTokenCount"), meta.get("thoughtsTokenCount"))
        return
    if api == "messages":
        # message_start carries the input (and a first output count); message_delta the
        # running output count, and in newer versions the input's fields again.
        found = body.get("usage")
        if event == "message_start" or body.get("type") == "message_start":
            message = body.get("message")
            found = message.get("usage") if isinstance(message, dict) else None
        if isinstance(found, dict):
            parts = [found.get(k) for k in ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")]
            if any(_int(p) is not None for p in parts):
                usage.input_tokens = _add(*parts)
            if _int(found.get("output_tokens")) is not None:
                usage.output_tokens = _int(found.get("output_tokens"))
        return
    if api == "responses":
        response = body.get("response") if isinstance(body.get("response"), dict) else body
        found = response.get("usage") if isinstance(response, dict) else None
        if isinstance(found, dict):
            usage.input_tokens = _int(found.get("input_tokens"))
            usage.output_tokens = _int(found.get("output_tokens"))
        return
    found = body.get("usage")  # chat completions: the answer, or the stream's last chunk
    if isinstance(found, dict):
        usage.input_tokens = _int(found.get("prompt_tokens"))
        usage.output_tokens = _int(found.get("completion_tokens"))


def ask_for_stream_usage(provider: Provider, api: str, body: dict[str, Any]) -> bool:
    """A streamed Chat Completions request is made to report its usage in its last
    chunk (``stream_options.include_usage``), which clients that do not ask for it
    ignore; True if the body was changed."""
    if provider != "openai" or api != "chat_completions" or body.get("stream") is not True:
        return False
    options = body.get("stream_options")
    if isinstance(options, dict) and options.get("include_usage") is True:
        return False
    body["stream_options"] = {**(options if isinstance(options, dict) else {}), "include_usage": True}
    return True


@dataclass
class EventStream:
    """Reads server-sent events from the bytes of a stream as they pass, for their
    usage numbers; never holds more than one event (at most PARSE_LIMIT)."""

    api: str
    provider: Provider
    usage: Usage = field(default_factory=Usage)
    error: str = ""
    # The stream's last event has passed (``[DONE]``, ``message_stop``, a response's
    # end): a client may stop reading there, before the HTTP answer ends.
    ended: bool = False
    _buffer: bytearray = field(default_factory=bytearray)
    _skipping: bool = False

    def feed(self, chunk: bytes) -> None:
        self._buffer += chunk
        while True:
            end, gap = _boundary(self._buffer)
            if end < 0:
                break
            block = bytes(self._buffer[:end])
            del self._buffer[: end + gap]
            if self._skipping:
                self._skipping = False
                continue
            self._event(block)
        if len(self._buffer) > PARSE_LIMIT:
            self._buffer.clear()
            self._skipping = True

    def close(self) -> None:
        if self._buffer.strip() and not self._skipping:
            self._event(bytes(self._buffer))
        self._buffer.clear()

    def _event(self, block: bytes) -> None:
        name, data = "", []
        for line in block.decode("utf-8", "replace").splitlines():
            if line.startswith("event:"):
                name = line[6:].strip()
            elif line.startswith("data:"):
                data.append(line[6:] if line.startswith("data: ") else line[5:])
        text = "\n".join(data)
        if text == "[DONE]" or name in _LAST_EVENTS:
            self.ended = True
        if not text or text == "[DONE]":
            return
        try:
            body = json.loads(text)
        except ValueError:
            return
        if isinstance(body, dict) and (name == "error" or body.get("type") == "error" or name == "response.failed"):
            self.error = _said(body)
        read_usage(self.api, self.provider, body, self.usage, name)


# The events that end a stream (Anthropic Messages, OpenAI Responses); Chat Completions
# ends with ``data: [DONE]``, Gemini with the HTTP answer itself.
_LAST_EVENTS = {"message_stop", "response.completed", "response.failed", "response.incomplete"}


def _boundary(buffer: bytearray) -> tuple[int, int]:
    """Where the first event ends (its blank line) and the blank line's length."""
    found = [(i, len(sep)) for sep in (b"\n\n", b"\r\n\r\n", b"\r\r") if (i := buffer.find(sep)) >= 0]
    return min(found) if found else (-1, 0)


def _said(body: dict[str, Any]) -> str:
    error = body.get("error")
    if isinstance(error, dict):
        return str(error.get("message") or error.get("type") or error)[:500]
    response = body.get("response")
    if isinstance(response, dict) and isinstance(response.get("error"), dict):
        return str(response["error"].get("message", ""))[:500]
    return str(error or "")[:500]


def error_message(raw: bytes) -> str:
    """What a provider's error answer says (bounded), for the record."""
    try:
        body = json.loads(raw)
    except ValueError:
        return raw[:300].decode("utf-8", "replace")
    if isinstance(body, list) and body and isinstance(body[0], dict):
        body = body[0]
    return _said(body) if isinstance(body, dict) else str(body)[:300]
